#include "kcache/onnx_stamp.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "kcache/key_builder.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;


// A small valid ONNX model (Identity on a float[1,4]), built with the protobuf API.
std::string make_model(float weight, const std::string& user_prop = "") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kcache-test");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  auto* graph = model.mutable_graph();
  graph->set_name("g");
  auto* node = graph->add_node();
  node->set_op_type("Add");
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  auto* init = graph->add_initializer();
  init->set_name("w");
  init->set_data_type(onnx::TensorProto::FLOAT);
  init->add_dims(1);
  init->add_dims(4);
  for (int i = 0; i < 4; ++i) {
    init->add_float_data(weight + static_cast<float>(i));
  }
  for (const char* name : {"x", "y"}) {
    auto* vi = std::string(name) == "x" ? graph->add_input() : graph->add_output();
    vi->set_name(name);
    auto* tensor = vi->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_value(1);
    tensor->mutable_shape()->add_dim()->set_dim_value(4);
  }
  if (!user_prop.empty()) {
    auto* p = model.add_metadata_props();
    p->set_key("author");
    p->set_value(user_prop);
  }
  std::string out;
  model.SerializeToString(&out);
  return out;
}

Key key_of(const std::string& text) {
  KeyBuilder kb("test");
  kb.add("x", text);
  return kb.key();
}

class OnnxStampTest : public ::testing::Test {
 protected:
  fs::path write_model(const std::string& bytes, const std::string& name = "m.onnx") {
    const fs::path p = m_dir.path() / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  test::TempDir m_dir;
};

TEST_F(OnnxStampTest, StampWritesThePassportIntoMetadataProps) {
  const fs::path p = write_model(make_model(1.0f, "ana"));
  const Key key = key_of("a");
  auto done = stamp_onnx_file(p, key, {{"team", "vision"}});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(*done, StampChange::stamped);
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(test::read_file(p)));
  std::map<std::string, std::string> props;
  for (const auto& kv : model.metadata_props()) {
    props[kv.key()] = kv.value();
  }
  EXPECT_EQ(props.at("author"), "ana");  // the user's own properties stay
  EXPECT_EQ(props.at("kcache.compiled"), "v1");
  EXPECT_EQ(props.at("kcache.key"), key.hex());
  EXPECT_EQ(props.at("kcache.label.team"), "vision");
  EXPECT_EQ(props.at("kcache.producer").rfind("kcache ", 0), 0u);
  EXPECT_EQ(props.at("kcache.content").size(), 64u);
  EXPECT_EQ(model.graph().initializer(0).float_data(2), 3.0f);
  auto stamp = verify_onnx_stamp(p, key);
  ASSERT_TRUE(stamp) << stamp.error().message;
  EXPECT_EQ(stamp->labels.at("team"), "vision");
}

TEST_F(OnnxStampTest, StampingTwiceChangesNothing) {
  const fs::path p = write_model(make_model(1.0f));
  const Key key = key_of("a");
  ASSERT_EQ(*stamp_onnx_file(p, key, {{"l", "1"}}), StampChange::stamped);
  const std::string once = test::read_file(p);
  const auto mtime = fs::last_write_time(p);
  ASSERT_EQ(*stamp_onnx_file(p, key, {{"l", "1"}}), StampChange::unchanged);
  EXPECT_EQ(test::read_file(p), once);
  EXPECT_EQ(fs::last_write_time(p), mtime);
  // A new key replaces the old stamp (no duplicates), and the first key can be restored exactly.
  ASSERT_EQ(*stamp_onnx_file(p, key_of("b"), {{"l", "1"}}), StampChange::stamped);
  EXPECT_EQ(read_onnx_stamp(p)->value().key, key_of("b").hex());
  ASSERT_EQ(*stamp_onnx_file(p, key, {{"l", "1"}}), StampChange::stamped);
  EXPECT_EQ(test::read_file(p), once);
}

// A model named through a symlink is stamped where it lives: the link stays
// a link (never replaced by a regular file), the target is replaced
// atomically with its mode kept.
TEST_F(OnnxStampTest, StampingThroughASymlinkKeepsTheLinkAndTheMode) {
  const fs::path target = write_model(make_model(1.0f), "real.onnx");
  ASSERT_EQ(::chmod(target.c_str(), 0640), 0);
  const fs::path link = m_dir.path() / "current.onnx";
  fs::create_symlink(target, link);
  ASSERT_EQ(*stamp_onnx_file(link, key_of("a"), {}), StampChange::stamped);
  EXPECT_TRUE(fs::is_symlink(link)) << "the symlink was replaced by a regular file";
  EXPECT_EQ(fs::read_symlink(link), target);
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U);
  auto stamp = verify_onnx_stamp(target, key_of("a"));
  ASSERT_TRUE(stamp) << stamp.error().message;
  // Nothing was left beside it.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(m_dir.path())) {
    files += e.path().filename().string().find("kcache") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(files, 0U);
}

TEST_F(OnnxStampTest, UnstampedModelIsRefused) {
  const fs::path p = write_model(make_model(1.0f));
  EXPECT_FALSE(read_onnx_stamp(p)->has_value());
  auto loaded = load_onnx_model(p, std::nullopt);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::corrupt);
  EXPECT_NE(loaded.error().message.find("no kcache stamp"), std::string::npos);
  auto installed = install_onnx(p, m_dir.path() / "dest.onnx", std::nullopt);
  ASSERT_FALSE(installed);
  EXPECT_FALSE(fs::exists(m_dir.path() / "dest.onnx"));
}

TEST_F(OnnxStampTest, WrongKeyIsRefused) {
  const fs::path p = write_model(make_model(1.0f));
  ASSERT_TRUE(stamp_onnx_file(p, key_of("a")));
  auto loaded = load_onnx_model(p, key_of("b"));
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("not the expected"), std::string::npos) << loaded.error().message;
  EXPECT_TRUE(load_onnx_model(p, key_of("a")));
  ASSERT_TRUE(install_onnx(p, m_dir.path() / "dest.onnx", key_of("a")));
  EXPECT_EQ(test::read_file(m_dir.path() / "dest.onnx"), test::read_file(p));
}

TEST_F(OnnxStampTest, ModelChangedAfterStampingIsRefused) {
  const fs::path p = write_model(make_model(1.0f));
  ASSERT_TRUE(stamp_onnx_file(p, key_of("a")));
  // Swap the weights but keep the stamp properties.
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(test::read_file(p)));
  model.mutable_graph()->mutable_initializer(0)->set_float_data(0, 42.0f);
  std::string tampered;
  model.SerializeToString(&tampered);
  write_model(tampered);
  auto loaded = load_onnx_model(p, key_of("a"));
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("changed after it was stamped"), std::string::npos) << loaded.error().message;
}

TEST_F(OnnxStampTest, NonOnnxBytesAreCorrupt) {
  const fs::path p = write_model("this is not a protobuf at all \xff\xff\xff");
  auto stamp = stamp_onnx_file(p, key_of("a"));
  ASSERT_FALSE(stamp);
  EXPECT_EQ(stamp.error().code, ErrorCode::corrupt);
  EXPECT_EQ(test::read_file(p), "this is not a protobuf at all \xff\xff\xff");
}

TEST_F(OnnxStampTest, PlanBuiltOnnxArtifactIsStampedAndCheckedOnReuse) {
  const std::string source = make_model(2.0f);
  write_model(source, "src.onnx");
  std::ofstream(m_dir.path() / "plan.toml") << R"(version = 1
output_dir = "out"
[[entry]]
name = "simplified"
builder = "command"
kind = "onnx"
inputs = ["src.onnx"]
labels = { stage = "prep" }
command = ["cp", "{input}", "{output}"]
)";
  const BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
  auto plan = Plan::load(m_dir.path() / "plan.toml");
  ASSERT_TRUE(plan) << plan.error().log;
  auto make = [&] {
    OrchestratorOptions o;
    o.builders = &registry;
    o.durability = Durability::none;
    o.finishers["onnx"] = make_onnx_stamp_finisher();
    return Orchestrator(std::move(o));
  };
  const HostFingerprint host = *HostFingerprint::parse("sm=87");
  auto first = make().run(*plan, host);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->entries[0].outcome, Outcome::built) << first->entries[0].error;
  const fs::path out = first->entries[0].path;
  EXPECT_EQ(out.filename(), "simplified_sm87_jpna_trtna_fp32.onnx");
  auto stamp = verify_onnx_stamp(out, Key::parse(first->entries[0].key).value());
  ASSERT_TRUE(stamp) << stamp.error().message;
  EXPECT_EQ(stamp->labels.at("stage"), "prep");
  EXPECT_EQ(stamp->labels.at("plan.entry"), "simplified");
  EXPECT_EQ(make().run(*plan, host)->entries[0].outcome, Outcome::reused);
  // A model whose stamp was stripped (sidecar updated to match) is not reused: it is rebuilt.
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(test::read_file(out)));
  model.clear_metadata_props();
  std::string stripped;
  model.SerializeToString(&stripped);
  std::ofstream(out, std::ios::binary | std::ios::trunc) << stripped;
  std::system(("cd '" + out.parent_path().string() + "' && sha256sum " + out.filename().string() + " > " +
               out.filename().string() + ".sha256").c_str());
  auto third = make().run(*plan, host);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->entries[0].outcome, Outcome::built);
  EXPECT_NE(third->entries[0].reason.find("passport digest differs"), std::string::npos) << third->entries[0].reason;
  EXPECT_TRUE(verify_onnx_stamp(out, std::nullopt));
}

}  // namespace
}  // namespace kcache
