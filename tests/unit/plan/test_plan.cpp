#include "kcache/plan.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "support/temp_dir.hpp"

namespace kcache {
namespace {

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(m_dir.path() / "model.onnx") << "onnx bytes"; }
  Result<Plan> parse(const std::string& text) { return Plan::parse(text, m_dir.path(), "plan.toml"); }
  // Expects exactly one problem, at `line`, whose text holds `what` and a fix.
  void expect_problem(const std::string& text, int line, const std::string& what) {
    auto plan = parse(text);
    ASSERT_FALSE(plan) << text;
    EXPECT_EQ(plan.error().code, ErrorCode::invalid_argument);
    const std::string& log = plan.error().log;
    EXPECT_NE(log.find("plan.toml:" + std::to_string(line) + ": "), std::string::npos) << log;
    EXPECT_NE(log.find(what), std::string::npos) << log;
    EXPECT_NE(log.find("; fix: "), std::string::npos) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  }
  test::TempDir m_dir;
};

TEST_F(PlanTest, ParsesEveryFieldOfAnEntry) {
  auto plan = parse(R"(version = 1
output_dir = "out"
[defaults]
precision = "fp16"
builder = "command"
labels = { team = "vision" }
timeout_s = 30

[[entry]]
name = "dinov2_vpr"
inputs = ["model.onnx"]
command = ["trtexec", "--onnx={input}", "--saveEngine={output}", "--{precision}"]
shapes = { input = [1, 3, 224, 224] }
options = { workspace = 1024, sparse = true, tactic = "fast" }
labels = { owner = "ana" }

[[entry]]
name = "kernels"
builder = "nvcc"
kind = "fatbin"
precision = "fp32"
inputs = ["model.onnx"]
flags = ["-O3"]
timeout_s = 5
)");
  ASSERT_TRUE(plan) << plan.error().log;
  EXPECT_EQ(plan->output_dir, m_dir.path() / "out");
  ASSERT_EQ(plan->entries.size(), 2u);
  const PlanEntry& a = plan->entries[0];
  EXPECT_EQ(a.name, "dinov2_vpr");
  EXPECT_EQ(a.builder, "command");
  EXPECT_EQ(a.precision, "fp16");
  EXPECT_EQ(a.line, 9);
  ASSERT_EQ(a.inputs.size(), 1u);
  EXPECT_EQ(a.inputs[0], m_dir.path() / "model.onnx");
  EXPECT_EQ(a.command.size(), 4u);
  EXPECT_EQ(a.shapes.at("input"), (std::vector<std::int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(a.options.at("workspace"), "1024");
  EXPECT_EQ(a.options.at("sparse"), "true");
  EXPECT_EQ(a.options.at("tactic"), "fast");
  EXPECT_EQ(a.labels.at("team"), "vision");
  EXPECT_EQ(a.labels.at("owner"), "ana");
  EXPECT_EQ(a.timeout.count(), 30);
  const PlanEntry& b = plan->entries[1];
  EXPECT_EQ(b.builder, "nvcc");
  EXPECT_EQ(b.kind, "fatbin");
  EXPECT_EQ(b.precision, "fp32");
  EXPECT_EQ(b.flags, std::vector<std::string>{"-O3"});
  EXPECT_EQ(b.timeout.count(), 5);
  EXPECT_EQ(b.line, 17);
}

TEST_F(PlanTest, EmptyPlanIsValidAndHasNoEntries) {
  auto plan = parse("version = 1\n");
  ASSERT_TRUE(plan) << plan.error().log;
  EXPECT_TRUE(plan->entries.empty());
  EXPECT_EQ(plan->output_dir, m_dir.path() / "engines");
}

TEST_F(PlanTest, HostProfilesAreKeptInOrderAndABadOneIsNamed) {
  auto plan = parse("version = 1\nhosts = [\"sm=87,jp=6.2\", \"sm=90\"]\n");
  ASSERT_TRUE(plan) << plan.error().log;
  EXPECT_EQ(plan->hosts, (std::vector<std::string>{"sm=87,jp=6.2", "sm=90"}));
  expect_problem("version = 1\nhosts = [\"sm=90\", \"gpu=h100\"]\n", 2, "host profile 'gpu=h100'");
}

TEST_F(PlanTest, UnknownKeyNamesLineAndSuggestsTheFix) {
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ncommand = [\"x\", \"{output}\"]\nprecison = \"fp16\"\n",
                 6, "did you mean 'precision'?");
}

TEST_F(PlanTest, DuplicateNamesAreRejected) {
  expect_problem("version = 1\n[defaults]\nbuilder = \"command\"\n[[entry]]\nname = \"a\"\n[[entry]]\nname = \"a\"\n", 7,
                 "duplicate entry name 'a' (first at line 5)");
}

TEST_F(PlanTest, NonPositiveShapeDimensionsAreRejected) {
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\nshapes = { x = [1,\n 0, 3] }\n", 6,
                 "not a positive integer");
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\nshapes = { x = [1, -2] }\n", 5,
                 "not a positive integer");
}

TEST_F(PlanTest, MissingInputFilesAreRejected) {
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ninputs = [\"model.onnx\", \"nope.onnx\"]\n", 5,
                 "input file 'nope.onnx' of entry 'a' does not exist");
}

TEST_F(PlanTest, MissingInputsAreAllowedWhenNotChecked) {
  PlanLoadOptions options;
  options.check_inputs = CheckInputs::no;
  auto plan = Plan::parse("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ninputs = [\"nope\"]\n", m_dir.path(),
                          "plan.toml", options);
  ASSERT_TRUE(plan) << plan.error().log;
}

TEST_F(PlanTest, UnknownBuildersAndPrecisionsAreRejected) {
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"comand\"\n", 4, "unknown builder 'comand'");
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\nprecision = \"fp17\"\n", 5,
                 "unknown precision 'fp17'");
}

TEST_F(PlanTest, NamesTheSchemaCannotHoldAreRejected) {
  expect_problem("version = 1\n[[entry]]\nname = \"net_sm87\"\nbuilder = \"command\"\n", 3, "collides with the file-name schema");
}

TEST_F(PlanTest, VersionIsRequired) {
  expect_problem("[[entry]]\nname = \"a\"\nbuilder = \"command\"\n", 1, "no version");
  expect_problem("version = 2\n", 1, "unsupported plan version");
}

TEST_F(PlanTest, EveryProblemIsListed) {
  auto plan = parse("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"nope\"\nprecision = \"x\"\nbogus = 1\n");
  ASSERT_FALSE(plan);
  EXPECT_EQ(std::count(plan.error().log.begin(), plan.error().log.end(), '\n'), 3) << plan.error().log;
  EXPECT_NE(plan.error().message.find("and 2 more"), std::string::npos) << plan.error().message;
}

TEST_F(PlanTest, TomlSyntaxErrorsNameTheLine) {
  auto plan = parse("version = 1\n[[entry]\nname = \"a\"\n");
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message.find("plan.toml:2: not valid TOML"), std::string::npos) << plan.error().message;
}

TEST_F(PlanTest, WrongTypesAreRejected) {
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ninputs = \"model.onnx\"\n", 5,
                 "must be a list of strings");
  expect_problem("version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\ntimeout_s = 0\n", 5, "positive integer");
}

TEST_F(PlanTest, LoadReportsAMissingFile) {
  auto plan = Plan::load(m_dir.path() / "absent.toml");
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, ErrorCode::not_found);
}

}  // namespace
}  // namespace kcache

namespace kcache {
namespace {

// F09 (in-suite part): random byte edits of a valid plan never crash the
// parser; every failure names the file and a line inside the text.
TEST(PlanFuzz, MutatedPlansParseOrFailWithALine) {
  test::TempDir dir;
  std::ofstream(dir.path() / "model.onnx") << "x";
  const std::string base = R"(version = 1
output_dir = "out"
[defaults]
builder = "command"
precision = "fp16"
labels = { a = "b" }
[[entry]]
name = "m"
inputs = ["model.onnx"]
command = ["tool", "{input}", "{output}"]
shapes = { x = [1, 3, 224, 224] }
options = { k = 1, f = true, s = "v" }
timeout_s = 10
)";
  const std::string alphabet = "[]{}=\"',.#\n 0123456789-_abcxyz\\\xff";
  std::uint64_t state = 88172645463325252ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int ok = 0;
  int failed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t pos = next() % (text.size() + 1);
      switch (next() % 3) {
        case 0:
          text.insert(pos, 1, alphabet[next() % alphabet.size()]);
          break;
        case 1:
          if (pos < text.size()) {
            text.erase(pos, 1 + next() % 8);
          }
          break;
        default:
          if (pos < text.size()) {
            text[pos] = alphabet[next() % alphabet.size()];
          }
      }
    }
    auto plan = Plan::parse(text, dir.path(), "fuzz.toml");
    if (plan) {
      ++ok;
      continue;
    }
    ++failed;
    const std::string& log = plan.error().log;
    ASSERT_EQ(log.rfind("fuzz.toml:", 0), 0u) << log;
    const int line = std::atoi(log.c_str() + std::string("fuzz.toml:").size());
    EXPECT_GE(line, 1) << log;
    EXPECT_LE(line, static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1) << log;
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace kcache
