// safetensors (nn/safetensors.h): round trips bit for bit, the exact bytes the
// writer lays out (compared with a header written by hand in the reference
// implementation's layout), float16 converted exactly, the CPU reader viewing the
// mapping without a copy, loading into modules by name with every mismatch
// listed, and each rule of the format refused with a message naming the field.
// The cross-check with the Python package is tests/interop (CTest
// safetensors_interop).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"
#include "nn/json.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "temp_path.h"

using namespace ember;
using ember::testing::same_bits;

namespace {

std::string temp_path(const std::string& name) {
  return testing::temp_path("ember_test_st_", name);
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file of the header size `n` (the header's length unless given), `header`
// and `data`.
std::string write_raw(const std::string& name, const std::string& header,
                      const std::vector<unsigned char>& data, int64_t n = -1) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  const uint64_t size = n < 0 ? header.size() : static_cast<uint64_t>(n);
  out.write(reinterpret_cast<const char*>(&size), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

std::string error_of(const std::string& path) {
  try {
    nn::read_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Tensor f32(std::vector<float> v, Shape shape) {
  return from_vector(v, shape);
}

Tensor i64(const std::vector<int64_t>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, kInt64);
  std::memcpy(t.raw_data(), v.data(), v.size() * 8);
  return t;
}

Tensor bools(const std::vector<bool>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, kBool);
  for (size_t i = 0; i < v.size(); ++i) static_cast<bool*>(t.raw_data())[i] = v[i];
  return t;
}

// The raw bits of a bfloat16 tensor.
std::vector<uint16_t> bf16_bits(const Tensor& t) {
  Tensor c = t.cpu().contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

}  // namespace

TEST_CASE("safetensors/write: the bytes are the reference layout (order, header, padding)") {
  StateDict sd;
  sd.insert("b", f32({1.0f, 2.0f}, {2}));
  sd.insert("a", i64({7}));
  sd.insert("c", bools({true, false, true}));
  const std::string path = temp_path("layout.safetensors");
  nn::save_safetensors(sd, path, {{"format", "pt"}});
  const std::vector<unsigned char> bytes = read_bytes(path);
  // int64 first, then float32, then bool; within a dtype by name.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"c\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]}}";
  const size_t padded = (header.size() + 7) / 8 * 8;
  REQUIRE(bytes.size() == 8 + padded + 19);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n == padded);
  CHECK(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header.size())) ==
        header);
  for (size_t i = header.size(); i < padded; ++i) CHECK(bytes[8 + i] == ' ');
  const unsigned char* data = bytes.data() + 8 + padded;
  int64_t a = 0;
  float b[2];
  std::memcpy(&a, data, 8);
  std::memcpy(b, data + 8, 8);
  CHECK(a == 7);
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == 2.0f);
  CHECK(data[16] == 1);
  CHECK(data[17] == 0);
  CHECK(data[18] == 1);
}

TEST_CASE("safetensors/round trip: every dtype, scalars and empty tensors, bit for bit") {
  Generator gen(3);
  StateDict sd;
  sd.insert("w", randn({3, 4}, kFloat32, &gen));
  sd.insert("d", randn({5}, kFloat64, &gen));
  sd.insert("h", randn({2, 2, 2}, kFloat32, &gen).to(kBFloat16));
  sd.insert("i", i64({-1, 0, INT64_MAX}));
  sd.insert("m", bools({true, false}));
  sd.insert("s", full({}, 2.5));
  sd.insert("e", empty({0, 4}));
  sd.insert("t", randn({4, 3}, kFloat32, &gen).transpose(0, 1));  // not contiguous
  const std::string path = temp_path("roundtrip.safetensors");
  nn::save_safetensors(sd, path, {{"k", "v"}, {"quote\"d", "line\nbreak"}});
  for (bool in_memory : {false, true}) {
    CAPTURE(in_memory);
    nn::SafetensorsFile f;
    if (in_memory) {
      const std::vector<unsigned char> bytes = read_bytes(path);
      f = nn::parse_safetensors(bytes.data(), bytes.size(), path);
    } else {
      f = nn::read_safetensors(path);
    }
    REQUIRE(f.tensors.size() == sd.size());
    for (const auto& [name, t] : sd) {
      CAPTURE(name);
      REQUIRE(f.tensors.contains(name));
      CHECK(same_bits(f.tensors.at(name), t));
    }
    CHECK(f.metadata == nn::SafetensorsMetadata{{"k", "v"}, {"quote\"d", "line\nbreak"}});
  }
}

TEST_CASE("safetensors/read: CPU tensors view the mapping (no allocation, no copy)") {
  StateDict sd;
  sd.insert("big", zeros({256, 1024}));  // 1 MiB
  const std::string path = temp_path("mmap.safetensors");
  nn::save_safetensors(sd, path);
  const int64_t before = memory_allocated(kCPU);
  nn::SafetensorsFile f = nn::read_safetensors(path);
  CHECK(memory_allocated(kCPU) == before);
  Tensor t = f.tensors.at("big");
  CHECK(t.storage()->nbytes() == 256 * 1024 * 4);
  // Writable in memory (the mapping is private); the file keeps its zeros.
  t.fill_(3.0);
  CHECK(t.sum().item() == 3.0 * 256 * 1024);
  CHECK(nn::read_safetensors(path).tensors.at("big").sum().item() == 0.0);
  f = {};
  CHECK(t.sum().item() == 3.0 * 256 * 1024);  // the tensor keeps the mapping alive
}

TEST_CASE("safetensors/float16: converted exactly to float32, or rounded to bfloat16") {
  // 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal),
  // inf, -0, 0x3555 = 0.333251953125.
  const std::vector<uint16_t> bits = {0x3c00, 0xc000, 0x7bff, 0x0001,
                                      0x0400, 0x7c00, 0x8000, 0x3555};
  std::vector<unsigned char> data(bits.size() * 2);
  std::memcpy(data.data(), bits.data(), data.size());
  const std::string path = write_raw(
      "f16.safetensors", "{\"h\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]}}", data);
  const std::vector<float> want = {
      1.0f,     -2.0f, 65504.0f,       5.9604644775390625e-08f, 6.103515625e-05f,
      INFINITY, -0.0f, 0.333251953125f};
  Tensor t = nn::read_safetensors(path).tensors.at("h");
  REQUIRE(t.dtype() == kFloat32);
  const std::vector<float> got = t.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&got[i], &want[i], 4) == 0);
  }
  nn::SafetensorsReadOptions as_bf16;
  as_bf16.float16 = nn::Float16As::BFloat16;
  Tensor b = nn::read_safetensors(path, as_bf16).tensors.at("h");
  REQUIRE(b.dtype() == kBFloat16);
  // bfloat16 bits, rounded to nearest even by hand: 0.333251953125 = 0x3eaaa000
  // -> 0x3eab (the dropped 0xa000 is over half); 65504 = 0x477fe000 -> 0x4780.
  const std::vector<uint16_t> want_bf16 = {0x3f80, 0xc000, 0x4780, 0x3380,
                                           0x3880, 0x7f80, 0x8000, 0x3eab};
  CHECK(bf16_bits(b) == want_bf16);
}

TEST_CASE("safetensors/load: a module by name, a prefix stripped or a function renaming") {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::Tanh(), nn::Linear(4, 2));
  Generator gen(9);
  StateDict torch_style;  // as a PyTorch model wrapped in `model` would name them
  for (const auto& [name, t] : model->state_dict())
    torch_style.insert("model." + name, randn(t.sizes(), kFloat32, &gen));
  const std::string path = temp_path("torch_style.safetensors");
  nn::save_safetensors(torch_style, path);

  SUBCASE("strip_prefix") {
    nn::SafetensorsLoadOptions o;
    o.strip_prefix = "model.";
    nn::load_safetensors(*model, path, o);
    for (const auto& [name, t] : model->state_dict())
      CHECK(same_bits(t, torch_style.at("model." + name)));
  }
  SUBCASE("rename, dropping an entry with nullopt, strict off") {
    nn::SafetensorsLoadOptions o;
    o.strict = false;
    o.rename = [](const std::string& n) -> std::optional<std::string> {
      if (n == "model.2.bias") return std::nullopt;
      return n.substr(6);
    };
    const Tensor bias_before = model->state_dict().at("2.bias").clone();
    nn::load_safetensors(*model, path, o);
    CHECK(same_bits(model->state_dict().at("0.weight"), torch_style.at("model.0.weight")));
    CHECK(same_bits(model->state_dict().at("2.bias"), bias_before));
  }
  SUBCASE("without the mapping: every problem listed, nothing changed") {
    const Tensor w_before = model->state_dict().at("0.weight").clone();
    const std::string msg = ember::testing::error_of([&] { nn::load_safetensors(*model, path); });
    CHECK(msg.find("safetensors '" + path + "': load_state_dict: 8 problems") != std::string::npos);
    CHECK(msg.find("missing key '0.weight'") != std::string::npos);
    CHECK(msg.find("unexpected key 'model.2.bias'") != std::string::npos);
    CHECK(msg.find("nothing was changed") != std::string::npos);
    CHECK(same_bits(model->state_dict().at("0.weight"), w_before));
  }
}

TEST_CASE(
    "safetensors/load: shape and dtype mismatches are all listed; F16 loads as the parameter's "
    "dtype") {
  nn::Linear fc(2, 3);
  StateDict bad;
  bad.insert("weight", zeros({2, 3}));       // transposed
  bad.insert("bias", zeros({3}, kFloat64));  // wrong dtype
  const std::string path = temp_path("mismatch.safetensors");
  nn::save_safetensors(bad, path);
  const std::string msg = ember::testing::error_of([&] { nn::load_safetensors(fc, path); });
  CHECK(msg.find("2 problems") != std::string::npos);
  CHECK(msg.find("shape mismatch for 'weight': checkpoint has [2, 3], model has [3, 2]") !=
        std::string::npos);
  CHECK(msg.find("dtype mismatch for 'bias': checkpoint has float64, model has float32") !=
        std::string::npos);

  // float16 weights: 0.5 (0x3800) and -1.5 (0xbe00) alternate.
  std::vector<uint16_t> w(6), b(3, 0x3c00);
  for (size_t i = 0; i < w.size(); ++i) w[i] = i % 2 ? 0xbe00 : 0x3800;
  std::vector<unsigned char> data(18);
  std::memcpy(data.data(), w.data(), 12);
  std::memcpy(data.data() + 12, b.data(), 6);
  const std::string half = write_raw("half.safetensors",
                                     "{\"weight\":{\"dtype\":\"F16\",\"shape\":[3,2],"
                                     "\"data_offsets\":[0,12]},\"bias\":{\"dtype\":\"F16\","
                                     "\"shape\":[3],\"data_offsets\":[12,18]}}",
                                     data);
  nn::load_safetensors(fc, half);
  CHECK(fc.weight.to_vector<float>() == std::vector<float>{0.5f, -1.5f, 0.5f, -1.5f, 0.5f, -1.5f});
  CHECK(fc.bias.to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});
}

TEST_CASE("safetensors/save: bad arguments named") {
  StateDict sd;
  sd.insert("__metadata__", zeros({1}));
  CHECK(ember::testing::error_of([&] {
          nn::save_safetensors(sd, temp_path("meta.safetensors"));
        }).find("'__metadata__' is the format's metadata key") != std::string::npos);
  StateDict undefined;
  undefined.insert("x", Tensor());
  CHECK(ember::testing::error_of([&] {
          nn::save_safetensors(undefined, temp_path("u.safetensors"));
        }).find("tensor 'x' is undefined") != std::string::npos);
  CHECK(ember::testing::error_of([&] {
          nn::save_safetensors(StateDict{}, std::filesystem::temp_directory_path().string());
        }).find("is a directory") != std::string::npos);
}

TEST_CASE("safetensors/read: each rule of the format, refused naming the field") {
  const std::vector<unsigned char> d8(8, 0);
  auto expect = [](const std::string& path, const std::string& text) {
    const std::string msg = error_of(path);
    CAPTURE(msg);
    CHECK(msg.find("safetensors '" + path + "': ") == 0);
    CHECK(msg.find(text) != std::string::npos);
  };
  const std::string one = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

  SUBCASE("truncated: shorter than the header size") {
    const std::string path = temp_path("tiny.safetensors");
    std::ofstream(path, std::ios::binary) << "abc";
    expect(path, "truncated: 3 bytes, shorter than the 8-byte header size");
  }
  SUBCASE("oversized header") {
    expect(write_raw("huge.safetensors", one, d8, 100'000'001),
           "header size 100000001 is over the format's limit of 100000000 bytes");
  }
  SUBCASE("header runs past the end") {
    expect(write_raw("past.safetensors", one, {}, 4096),
           "truncated: the header size says 4096 header bytes, the file has ");
  }
  SUBCASE("malformed JSON") {
    expect(write_raw("json.safetensors", "{\"a\":{\"dtype\":\"F32\",}}", {}),
           "header: invalid JSON at byte 20: expected a member name in double quotes");
    expect(write_raw("json2.safetensors", "{\"a\":1} x", {}),
           "invalid JSON at byte 8: unexpected 'x' after the value");
    expect(write_raw("json3.safetensors", "{\"a\":01}", {}), "a number has a leading zero");
    expect(write_raw("json4.safetensors", std::string("{\"a\xff\":1}"), {}), "invalid UTF-8 byte");
  }
  SUBCASE("not an object") {
    expect(write_raw("array.safetensors", "[1,2]", {}),
           "the header must be a JSON object, got a array");
  }
  SUBCASE("duplicate names") {
    expect(write_raw("dup.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                     d8),
           "duplicate tensor name 'a' in the header");
  }
  SUBCASE("dtypes: refused by name, unknown") {
    expect(
        write_raw("i32.safetensors",
                  "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8),
        "tensor 'a' 'dtype' I32 is not supported (ember reads F32, F64, BF16, F16, I64 and BOOL)");
    expect(write_raw("q7.safetensors",
                     "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8),
           "tensor 'a' 'dtype' \"Q7\" is not a safetensors dtype");
  }
  SUBCASE("metadata values must be strings") {
    expect(write_raw("meta.safetensors", "{\"__metadata__\":{\"epoch\":3}}", {}),
           "'__metadata__' value of 'epoch' must be a string, got a number");
    expect(write_raw("meta2.safetensors", "{\"__metadata__\":[]}", {}),
           "'__metadata__' must be an object of strings, got a array");
  }
  SUBCASE("fields") {
    expect(write_raw("nofield.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d8),
           "tensor 'a' has no 'data_offsets'");
    expect(write_raw("negshape.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", d8),
           "tensor 'a' 'shape' entry must be a non-negative integer, got -2");
    expect(write_raw("offs3.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", d8),
           "tensor 'a' 'data_offsets' must be an array [BEGIN, END]");
  }
  SUBCASE("END - BEGIN must be numel x item size") {
    expect(
        write_raw("size.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d8),
        "tensor 'a' 'data_offsets' [0, 8] hold 8 bytes; its 'shape' [3] and 'dtype' F32 need 12");
  }
  SUBCASE("overlap") {
    expect(write_raw("overlap.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                     d8),
           "tensor 'b' 'data_offsets' [4, 8] overlap tensor 'a' [0, 8]");
  }
  SUBCASE("hole") {
    expect(write_raw("hole.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d8),
           "tensor 'a' 'data_offsets' [4, 8] leave a hole: bytes [0, 4) belong to no tensor");
  }
  SUBCASE("file size must be 8 + N + the last END") {
    expect(write_raw("short.safetensors", one, std::vector<unsigned char>(5)),
           "truncated: the 'data_offsets' end at 8, the file has 5 data bytes");
    expect(write_raw("long.safetensors", one, std::vector<unsigned char>(9)),
           "trailing bytes: the 'data_offsets' end at 8, the file has 9 data bytes");
  }
}

TEST_CASE("safetensors/json: the strict parser's corners") {
  using nn::json::parse;
  const nn::json::Value v =
      parse(" {\"s\":\"a\\u00e9\\ud83d\\ude00\\n\",\"n\":[-1.5e3,0,true,null]} ", "t");
  REQUIRE(v.members.size() == 2);
  CHECK(v.members[0].value.text == "a\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(v.members[1].value.items[0].text == "-1.5e3");
  CHECK(nn::json::quote("a\"\\\x01\t") == "\"a\\\"\\\\\\u0001\\t\"");
  auto bad = [](const std::string& text, const std::string& want) {
    const std::string msg = ember::testing::error_of([&] { parse(text, "t"); });
    CAPTURE(msg);
    CHECK(msg.find(want) != std::string::npos);
  };
  bad("", "expected a value, found the end of the text");
  bad("[1,]", "unexpected ']' where a value should start");
  bad("{\"a\":1,}", "expected a member name in double quotes");
  bad("\"\\ud800\"", "a high surrogate without its low half");
  bad("\"tab\there\"", "control character \\x09 in a string");
  bad("tru", "unknown literal (expected 'true')");
  bad("1.", "a number has no digits after '.'");
  bad(std::string(65, '[') + std::string(65, ']'), "nested deeper than 64 levels");
  CHECK(nn::json::to_uint64(parse("18446744073709551615", "t"), "x") == UINT64_MAX);
  CHECK(ember::testing::error_of([&] {
          nn::json::to_uint64(parse("18446744073709551616", "t"), "x");
        }).find("does not fit 64 bits") != std::string::npos);
}

TEST_CASE("safetensors/cuda: read onto the device and load a CUDA module through pinned memory" *
          doctest::test_suite("cuda")) {
  Generator gen(5);
  StateDict sd;
  sd.insert("big", randn({3, 1 << 20}, kFloat32, &gen));  // 12 MiB: two staging chunks
  sd.insert("h", randn({7}, kFloat32, &gen).to(kBFloat16));
  sd.insert("i", i64({1, 2, 3}));
  const std::string path = temp_path("cuda.safetensors");
  nn::save_safetensors(sd, path);
  nn::SafetensorsReadOptions o;
  o.device = kCUDA;
  nn::SafetensorsFile f = nn::read_safetensors(path, o);
  for (const auto& [name, t] : sd) {
    CAPTURE(name);
    CHECK(f.tensors.at(name).is_cuda());
    CHECK(same_bits(f.tensors.at(name), t));
  }
  auto model =
      std::make_shared<nn::Sequential>(nn::Linear(4, 3), nn::LayerNorm(nn::LayerNormOptions({3})));
  StateDict weights;
  for (const auto& [name, t] : model->state_dict())
    weights.insert(name, randn(t.sizes(), kFloat32, &gen));
  nn::save_safetensors(weights, path);
  model->to(kCUDA);
  nn::load_safetensors(*model, path);
  for (const auto& [name, t] : model->state_dict()) {
    CAPTURE(name);
    CHECK(t.is_cuda());
    CHECK(same_bits(t, weights.at(name)));
  }
}
