// Block selections for partial activation checkpointing (models/block_selection.h): what parses,
// what is refused and how the message reads, and each model's block numbering against its modules.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "models/block_selection.h"
#include "models/registry.h"

using namespace frugal;
using models::BlockSelection;

TEST_CASE("block selection: ranges and lists parse, merge and print back") {
  CHECK(BlockSelection().empty());
  CHECK(BlockSelection().str() == "none");
  CHECK(BlockSelection::parse("all").is_all());
  CHECK(BlockSelection::parse("all").str() == "all");
  const BlockSelection s = BlockSelection::parse("5-9,1,3");
  CHECK(s.str() == "1,3,5-9");
  CHECK(s.contains(1));
  CHECK_FALSE(s.contains(2));
  CHECK(s.contains(9));
  CHECK(s.count(17) == 7);
  CHECK(s.count(6) == 4);  // 1, 3, 5 and 6 of a 6-block model
  CHECK(BlockSelection::parse("5,1-3,4") == BlockSelection::first(5));
  CHECK(BlockSelection::parse("2-7").str() == "2-7");
  CHECK(BlockSelection::first(0).empty());
  CHECK(models::checkpointed_blocks(true, BlockSelection::parse("2")).is_all());
  CHECK(models::checkpointed_blocks(false, BlockSelection::parse("2")).str() == "2");
}

TEST_CASE("block selection: bad text is a ValueError naming the text and the token") {
  CHECK_THROWS_WITH_AS(BlockSelection::parse(""), doctest::Contains("no block given"), ValueError);
  CHECK_THROWS_WITH_AS(
      BlockSelection::parse("2-x"),
      doctest::Contains("checkpoint blocks '2-x': '2-x' is not a block number or a range such as 2-7 (blocks are numbered up to 1023)"),
      ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("1,,3"), doctest::Contains("'1,,3': '' is not a block number"), ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("3,"), doctest::Contains("'' is not a block number"), ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("-3"), doctest::Contains("'-3' is not a block number"), ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("7-2"), doctest::Contains("checkpoint blocks '7-2': '7-2' runs backwards (write 2-7)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("1-1024"), doctest::Contains("'1-1024' is not a block number"), ValueError);
  CHECK_THROWS_WITH_AS(BlockSelection::parse("ALL"), doctest::Contains("'ALL' is not a block number"), ValueError);
}

TEST_CASE("block selection: a block the model lacks is refused with the model's range") {
  CHECK_THROWS_WITH_AS(models::check_checkpoint_blocks("mobilenet_v2", BlockSelection::parse("0-99")),
                       doctest::Contains("checkpoint blocks 0-99: block 0 is out of range: mobilenet_v2 has blocks 1-17 "
                                         "(features.1 .. features.17)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(models::check_checkpoint_blocks("resnet18", BlockSelection::parse("2,9")),
                       doctest::Contains("checkpoint blocks 2,9: block 9 is out of range: resnet18 has blocks 1-8 (layer1.0 .. layer4.1)"),
                       ValueError);
  CHECK_NOTHROW(models::check_checkpoint_blocks("resnet50", BlockSelection::parse("16")));
  CHECK_NOTHROW(models::check_checkpoint_blocks("cnn", BlockSelection::parse("all")));
  // The model itself refuses too, for a caller that builds it without the registry's check.
  CHECK_THROWS_WITH_AS(models::make_model("cnn", {.checkpoint_blocks = BlockSelection::parse("4")}),
                       doctest::Contains("cnn has blocks 1-3 (features.0-2 .. features.6-7)"), ValueError);
}

TEST_CASE("block selection: each model's block names are its repeated blocks, in order") {
  CHECK(models::block_names("mobilenet_v2").size() == 17);
  CHECK(models::block_names("resnet18") ==
        std::vector<std::string>{"layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1", "layer4.0", "layer4.1"});
  CHECK(models::block_names("resnet50").size() == 16);
  CHECK(models::block_names("cnn") == std::vector<std::string>{"features.0-2", "features.3-5", "features.6-7"});
  for (const char* name : {"mobilenet_v2", "resnet18"}) {
    CAPTURE(name);
    const auto model = models::make_model(name, {.num_classes = 10, .in_channels = 1});
    std::set<std::string> modules;
    for (const auto& [module_name, module] : model->named_modules()) modules.insert(module_name);
    for (const std::string& block : models::block_names(name)) CHECK_MESSAGE(modules.count(block) == 1, block);
  }
  // The CNN's last unit ends at its last feature layer.
  const auto cnn = models::make_model("cnn");
  std::set<std::string> modules;
  for (const auto& [module_name, module] : cnn->named_modules()) modules.insert(module_name);
  CHECK(modules.count("features.7") == 1);
  CHECK(modules.count("features.8") == 0);
}
