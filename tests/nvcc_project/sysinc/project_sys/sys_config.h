// A "system" header, found through -isystem (included by k25-k27).
#pragma once

#define PROJECT_SYS_LEVEL 2
