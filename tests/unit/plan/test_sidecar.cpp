#include "plan/sidecar.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "support/temp_dir.hpp"
#include "util/sha256.hpp"

namespace kcache::plan {
namespace {

void write(const std::filesystem::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

TEST(Sidecar, IsReadBySha256sumCheck) {
  test::TempDir dir;
  const auto file = dir.path() / "m_sm87_jpna_trtna_fp16.engine";
  write(file, "engine bytes");
  auto digest = hash_file(file);
  ASSERT_TRUE(digest);
  EXPECT_EQ(digest->sha256, util::sha256_hex("engine bytes"));
  EXPECT_EQ(digest->size, 12u);
  write(sidecar_path(file), sidecar_text(digest->sha256, file.filename().string()));
  const std::string cmd = "cd '" + dir.path().string() + "' && sha256sum --status --strict -c m_sm87_jpna_trtna_fp16.engine.sha256";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(check_sidecar(file).state, SidecarState::ok);
}

TEST(Sidecar, ReadsWhatSha256sumWrites) {
  test::TempDir dir;
  const auto file = dir.path() / "x.cubin";
  write(file, std::string(100000, 'x'));
  const std::string cmd = "cd '" + dir.path().string() + "' && sha256sum x.cubin > x.cubin.sha256";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const SidecarCheck check = check_sidecar(file);
  EXPECT_EQ(check.state, SidecarState::ok);
  EXPECT_EQ(check.digest.size, 100000u);
}

TEST(Sidecar, FlippedBitInTheFileIsAMismatch) {
  test::TempDir dir;
  const auto file = dir.path() / "x.engine";
  std::string bytes(4096, 'a');
  write(file, bytes);
  write(sidecar_path(file), sidecar_text(util::sha256_hex(bytes), "x.engine"));
  bytes[1234] = static_cast<char>(bytes[1234] ^ 0x01);
  write(file, bytes);
  const SidecarCheck check = check_sidecar(file);
  EXPECT_EQ(check.state, SidecarState::mismatch);
  EXPECT_EQ(check.digest.sha256, util::sha256_hex(bytes));
  EXPECT_NE(check.sidecar_sha256, check.digest.sha256);
}

TEST(Sidecar, MalformedOrMisnamedSidecarsAreBad) {
  test::TempDir dir;
  const auto file = dir.path() / "x.engine";
  write(file, "abc");
  const std::string good = util::sha256_hex("abc");
  for (const std::string& text : {std::string(""), good, good + "  y.engine\n", good + " x.engine\n",
                                  good.substr(1) + "   x.engine\n", std::string(64, 'G') + "  x.engine\n",
                                  good + "  x.engine\n" + std::string(5000, 'z')}) {
    write(sidecar_path(file), text);
    EXPECT_EQ(check_sidecar(file).state, SidecarState::bad_sidecar) << text.substr(0, 80);
  }
  write(sidecar_path(file), good + " *x.engine\n");  // binary-mode marker
  EXPECT_EQ(check_sidecar(file).state, SidecarState::ok);
}

TEST(Sidecar, MissingPiecesAreStates) {
  test::TempDir dir;
  const auto file = dir.path() / "x.engine";
  EXPECT_EQ(check_sidecar(file).state, SidecarState::missing_file);
  write(file, "abc");
  EXPECT_EQ(check_sidecar(file).state, SidecarState::missing_sidecar);
  std::filesystem::remove(file);
  std::filesystem::create_symlink(dir.path() / "elsewhere", file);
  EXPECT_EQ(check_sidecar(file).state, SidecarState::missing_file);
}

}  // namespace
}  // namespace kcache::plan
