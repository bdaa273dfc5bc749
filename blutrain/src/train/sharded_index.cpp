// sharded_index.cpp: the shard files' names and shard_index.json (Note [Sharded checkpoints] in
// sharded_checkpoint.h). The index is read back from disk, so every field is checked and every
// tensor's slices must tile it exactly: a damaged or hand-edited index is an error naming the file.
#include <algorithm>
#include <cstdio>

#include "blutensor/error.h"
#include "blutensor/json.h"
#include "blutrain/files.h"
#include "train/sharded_checkpoint.h"

namespace blu::train {

std::string shard_file_name(const std::string& kind, int rank, int world_size) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), ".rank%05d-of-%05d.safetensors", rank, world_size);
  return kind + buf;
}

std::string slice_name(const std::string& tensor, int64_t begin) { return tensor + "@" + std::to_string(begin); }

bool is_sharded_checkpoint(const std::string& dir) { return file_exists(dir + "/" + kShardIndexFile); }

std::string ShardIndex::to_json() const {
  using json::Value;
  std::map<std::string, Value> tensors_json;
  for (const auto& [name, t] : tensors) {
    std::vector<Value> shape;
    for (int64_t d : t.shape) shape.push_back(Value::integer(d));
    std::map<std::string, Value> m = {
        {"file", Value::string(t.kind)}, {"dtype", Value::string("F32")}, {"shape", Value::array(shape)}};
    if (t.flat_offset >= 0) m["flat_offset"] = Value::integer(t.flat_offset);
    tensors_json[name] = Value::object(m);
  }
  std::vector<Value> ranks;
  for (std::size_t r = 0; r < rank_slices.size(); ++r) {
    std::map<std::string, Value> files;
    for (const char* kind : kShardKinds)
      files[kind] = Value::string(shard_file_name(kind, static_cast<int>(r), world_size));
    std::vector<Value> slices;
    for (const TensorSlice& s : rank_slices[r])
      slices.push_back(Value::array({Value::string(s.tensor), Value::integer(s.begin), Value::integer(s.end)}));
    ranks.push_back(Value::object({{"files", Value::object(files)}, {"slices", Value::array(slices)}}));
  }
  return Value::object({{"format", Value::string(kShardFormat)},
                        {"world_size", Value::integer(world_size)},
                        {"zero", Value::integer(zero_stage)},
                        {"partitioning", Value::string(partitioning)},
                        {"tensors", Value::object(tensors_json)},
                        {"ranks", Value::array(ranks)}})
             .dump() +
         "\n";
}

ShardIndex ShardIndex::from_json(const std::string& text, const std::string& path) {
  const json::Value v = parse_json(text, path);
  auto member = [&](const json::Value& obj, const std::string& key) -> const json::Value& {
    return json_member(obj, key, path);
  };
  BLU_CHECK(v.is_object(), path, ": expected a JSON object");
  BLU_CHECK(member(v, "format").is_string() && member(v, "format").as_string() == kShardFormat, path,
            ": \"format\" is ", member(v, "format").dump(), ", expected \"", kShardFormat, "\"");
  ShardIndex ix;
  const json::Value& world = member(v, "world_size");
  BLU_CHECK(world.is_integer() && world.as_integer() >= 1 && world.as_integer() <= (1 << 20), path,
            ": \"world_size\" is ", world.dump(), ", not a rank count");
  ix.world_size = static_cast<int>(world.as_integer());
  const json::Value& zero = member(v, "zero");
  BLU_CHECK(zero.is_integer() && zero.as_integer() >= 1 && zero.as_integer() <= 3, path, ": \"zero\" is ",
            zero.dump(), ", not 1, 2 or 3");
  ix.zero_stage = static_cast<int>(zero.as_integer());
  if (const json::Value* p = v.find("partitioning"); p && p->is_string()) ix.partitioning = p->as_string();
  const json::Value& tensors = member(v, "tensors");
  BLU_CHECK(tensors.is_object(), path, ": \"tensors\" is not an object");
  for (const auto& [name, t] : tensors.as_object()) {
    const std::string what = path + ": tensor '" + name + "'";
    BLU_CHECK(t.is_object(), what, " is not an object");
    ShardedTensorInfo info;
    const json::Value& kind = json_member(t, "file", what);
    BLU_CHECK(kind.is_string() && (kind.as_string() == "model" || kind.as_string() == "optimizer"), what,
              ": \"file\" is ", kind.dump(), ", expected \"model\" or \"optimizer\"");
    info.kind = kind.as_string();
    const json::Value& dtype = json_member(t, "dtype", what);
    BLU_CHECK(dtype.is_string() && dtype.as_string() == "F32", what, ": \"dtype\" is ", dtype.dump(),
              ", expected \"F32\"");
    const json::Value& shape = json_member(t, "shape", what);
    BLU_CHECK(shape.is_array() && shape.as_array().size() <= 8, what, ": \"shape\" is not an array of dims");
    int64_t numel = 1;
    for (const json::Value& d : shape.as_array()) {
      BLU_CHECK(d.is_integer() && d.as_integer() >= 0 && d.as_integer() <= (int64_t{1} << 40), what,
                ": bad dimension ", d.dump());
      info.shape.push_back(d.as_integer());
      BLU_CHECK(!__builtin_mul_overflow(numel, d.as_integer(), &numel) && numel <= (int64_t{1} << 40), what,
                ": shape too large");
    }
    if (const json::Value* off = t.find("flat_offset"); off && off->is_integer()) info.flat_offset = off->as_integer();
    ix.tensors[name] = info;
  }
  const json::Value& ranks = member(v, "ranks");
  BLU_CHECK(ranks.is_array() && ranks.as_array().size() == static_cast<std::size_t>(ix.world_size), path,
            ": \"ranks\" must list ", ix.world_size, " ranks (\"world_size\")");
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> cover;
  for (std::size_t r = 0; r < ranks.as_array().size(); ++r) {
    const std::string what = path + ": rank " + std::to_string(r);
    const json::Value& entry = ranks.as_array()[r];
    BLU_CHECK(entry.is_object(), what, " is not an object");
    const json::Value& files = json_member(entry, "files", what);
    for (const char* kind : kShardKinds) {
      const json::Value& f = json_member(files, kind, what + " \"files\"");
      const std::string expected = shard_file_name(kind, static_cast<int>(r), ix.world_size);
      BLU_CHECK(f.is_string() && f.as_string() == expected, what, ": ", kind, " file is ", f.dump(), ", expected \"",
                expected, "\"");
    }
    const json::Value& slices = json_member(entry, "slices", what);
    BLU_CHECK(slices.is_array(), what, ": \"slices\" is not an array");
    std::vector<TensorSlice> mine;
    for (const json::Value& s : slices.as_array()) {
      BLU_CHECK(s.is_array() && s.as_array().size() == 3 && s.as_array()[0].is_string() &&
                    s.as_array()[1].is_integer() && s.as_array()[2].is_integer(),
                what, ": slice ", s.dump(), " is not [tensor, begin, end]");
      TensorSlice ts{s.as_array()[0].as_string(), s.as_array()[1].as_integer(), s.as_array()[2].as_integer()};
      const auto t = ix.tensors.find(ts.tensor);
      BLU_CHECK(t != ix.tensors.end(), what, ": slice of unknown tensor '", ts.tensor, "'");
      BLU_CHECK(0 <= ts.begin && ts.begin < ts.end && ts.end <= shape_numel(t->second.shape), what, ": slice [",
                ts.begin, ", ", ts.end, ") of '", ts.tensor, "' is outside its ", shape_numel(t->second.shape),
                " elements");
      cover[ts.tensor].push_back({ts.begin, ts.end});
      mine.push_back(std::move(ts));
    }
    ix.rank_slices.push_back(std::move(mine));
  }
  for (const auto& [name, t] : ix.tensors) {
    std::vector<std::pair<int64_t, int64_t>>& c = cover[name];
    std::sort(c.begin(), c.end());
    int64_t next = 0;
    for (const auto& [b, e] : c) {
      BLU_CHECK(b == next, path, ": tensor '", name, "' elements [", std::min(b, next), ", ", std::max(b, next), ") ",
                b > next ? "are in no shard" : "are in two shards", " (damaged index)");
      next = e;
    }
    BLU_CHECK(next == shape_numel(t.shape), path, ": tensor '", name, "' elements [", next, ", ", shape_numel(t.shape),
              ") are in no shard (damaged index)");
  }
  return ix;
}

}  // namespace blu::train
