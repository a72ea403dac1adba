// The config.json reader: the JSON, each field's check, and the file; which fields a model_type
// reads, and the defaults its config class takes, are its family's (model/families.cpp).
#include "model/model_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/families.h"

namespace vrambench {
namespace {

using Json = nlohmann::json;

// The dtype the checkpoint is stored in, which transformers 5 loads it in by default: "dtype"
// (transformers 5 writes it), else "torch_dtype"; none where the config names neither or names
// something else ("auto").
std::optional<DType> model_dtype(const ConfigReader& r, const Json& config) {
  for (const char* field : {"dtype", "torch_dtype"}) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_string()) r.fail(fmt::format("field '{}' is {}, not a string", field, it->dump()));
    const std::string name = it->get<std::string>();
    if (name == "float32") return DType::f32;
    if (name == "float16") return DType::f16;
    if (name == "bfloat16") return DType::bf16;
    return std::nullopt;
  }
  return std::nullopt;
}

Json parse_config(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw UsageError(fmt::format("invalid --model {}: not JSON ({})", source, e.what()));
  }
}

// The model of a parsed config.json (model_from_config_text).
ModelConfig model_from_config(const Json& config, std::string name, std::string source) {
  const ConfigReader r(config, source);
  if (!config.is_object()) r.fail("not a JSON object");
  const auto type_field = config.find("model_type");
  if (type_field == config.end() || !type_field->is_string())
    r.fail("missing field 'model_type' (a transformers config.json has one)");
  ModelConfig m = family_model(r, type_field->get<std::string>());
  m.name = std::move(name);
  m.model_type = type_field->get<std::string>();
  m.source = std::move(source);
  m.dtype = model_dtype(r, config);
  return m;
}

}  // namespace

std::int64_t ConfigReader::required(std::string_view field, std::string_view model_type) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null())
    fail(fmt::format("missing field '{}' (a {} model needs it)", field, model_type));
  return positive(field, *it);
}

std::int64_t ConfigReader::optional(std::string_view field, std::int64_t fallback) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return fallback;
  return positive(field, *it);
}

double ConfigReader::positive_or_null(std::string_view field, double fallback) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end()) return fallback;
  if (it->is_null()) return 0.0;
  if (!it->is_number() || !(it->get<double>() > 0.0))
    fail(fmt::format("field '{}' is {}, not a positive number or null", field, it->dump()));
  return it->get<double>();
}

double ConfigReader::non_negative(std::string_view field, double fallback) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() >= 0.0))
    fail(fmt::format("field '{}' is {}, not a number >= 0", field, it->dump()));
  return it->get<double>();
}

std::vector<std::int64_t> ConfigReader::index_list(std::string_view field,
                                                   std::int64_t below) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return {};
  std::vector<std::int64_t> out;
  if (it->is_array())
    for (const Json& v : *it) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= below)
        break;
      out.push_back(v.get<std::int64_t>());
    }
  if (!it->is_array() || out.size() != it->size())
    fail(fmt::format("field '{}' is {}, not a list of layer indices below {}", field, it->dump(),
                     below));
  return out;
}

std::optional<std::vector<std::int64_t>> ConfigReader::layers_of_kind(std::string_view field,
                                                                      std::int64_t layers,
                                                                      std::string_view kind) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return std::nullopt;
  const bool strings = it->is_array() && std::all_of(it->begin(), it->end(),
                                                     [](const Json& v) { return v.is_string(); });
  if (!strings || static_cast<std::int64_t>(it->size()) != layers)
    fail(fmt::format("field '{}' is {}, not a list of {} layer kinds", field, it->dump(), layers));
  std::vector<std::int64_t> out;
  for (std::size_t l = 0; l < it->size(); ++l)
    if ((*it)[l].get<std::string>() == kind) out.push_back(static_cast<std::int64_t>(l));
  return out;
}

std::string ConfigReader::text(std::string_view field, std::string_view fallback) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) fail(fmt::format("field '{}' is {}, not a string", field, it->dump()));
  return it->get<std::string>();
}

bool ConfigReader::flag(std::string_view field, bool fallback) const {
  const auto it = config_.find(std::string(field));
  if (it == config_.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail(fmt::format("field '{}' is {}, not true or false", field, it->dump()));
  return it->get<bool>();
}

bool ConfigReader::has(std::string_view field) const {
  return config_.contains(std::string(field));
}

void ConfigReader::fail(const std::string& what) const {
  throw UsageError(fmt::format("invalid --model {}: {}", source_, what));
}

std::int64_t ConfigReader::positive(std::string_view field, const Json& value) const {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() &&
       value.get<std::uint64_t>() >
           static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) ||
      value.get<std::int64_t>() <= 0)
    fail(fmt::format("field '{}' is {}, not a positive whole number", field, value.dump()));
  return value.get<std::int64_t>();
}

ModelConfig model_from_config_text(std::string_view text, std::string name, std::string source) {
  const Json config = parse_config(text, source);
  return model_from_config(config, std::move(name), std::move(source));
}

ModelConfig read_model_file(std::string_view path) {
  namespace fs = std::filesystem;
  fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw UsageError(
        fmt::format("invalid --model {}: cannot read {} (give a config.json or a "
                    "folder holding one)",
                    path, file.string()));
  std::ostringstream text;
  text << in.rdbuf();
  const Json config = parse_config(text.str(), path);
  // The model's name: the config's _name_or_path, else its folder's name.
  std::string name;
  if (const auto it = config.find("_name_or_path"); it != config.end() && it->is_string())
    name = it->get<std::string>();
  if (name.empty()) {
    const fs::path folder = fs::absolute(file, ec).parent_path();
    name = folder.filename().string();
  }
  if (name.empty()) name = file.filename().string();
  return model_from_config(config, std::move(name), std::string(path));
}

}  // namespace vrambench
