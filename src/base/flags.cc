#include "src/base/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace ddplab {

Flags::Flags(int argc, char** argv, const std::set<std::string>& known, const std::set<std::string>& bare) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (!known.count(name)) throw UsageError(fmt::format("unknown flag --{} (see --help)", name));
      const bool next_is_value = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0;
      if (bare.count(name) && !next_is_value) {
        value = "true";
      } else {
        if (i + 1 >= argc) throw UsageError(fmt::format("--{} needs a value", name));
        value = argv[++i];
      }
    }
    if (!known.count(name)) throw UsageError(fmt::format("unknown flag --{} (see --help)", name));
    if (values_.count(name)) throw UsageError(fmt::format("--{} given twice", name));
    values_[name] = value;
  }
}

std::string escape_control(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80;
    if (c >= 0x20 && c != 0x7f && !c1) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c1) {  // U+0080..U+009F in UTF-8: terminals act on these too (CSI is U+009B)
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]) & 0x9f);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

std::string hide_passwords(const std::string& text) {
  std::string out = text;
  const std::string scheme = "redis://";
  for (size_t at = out.find(scheme); at != std::string::npos; at = out.find(scheme, at + scheme.size())) {
    const size_t start = at + scheme.size();
    const size_t end = out.find('\n', start);  // as --store reads it: the last '@' is the password's end
    const size_t sign = out.rfind('@', end == std::string::npos ? std::string::npos : end - 1);
    if (sign == std::string::npos || sign < start || (end != std::string::npos && sign >= end)) continue;
    const size_t colon = out.find(':', start);
    const size_t from = colon != std::string::npos && colon < sign ? colon + 1 : start;  // USER stays
    out.replace(from, sign - from, "***");
  }
  return out;
}

int guarded_main(const char* program, int argc, char** argv, int (*run)(int, char**)) {
  // Line-buffered even into a pipe: under `2>&1` a line on stderr then lands after the stdout lines printed
  // before it, not ahead of the whole block-buffered output.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program, escape_control(e.what()).c_str());
    return 2;
  } catch (const RunError& e) {
    std::fprintf(stderr, "%s: %s\n", program, escape_control(e.what()).c_str());
    return 1;
  } catch (const NonFiniteError& e) {
    std::fprintf(stderr, "%s: %s\n", program, escape_control(e.what()).c_str());
    return 4;
  } catch (const std::bad_alloc&) {
    // The limits (src/base/limits.h) refuse runs that cannot fit before they start; this is what slipped past.
    std::fprintf(stderr, "%s: out of memory (the run needed more than this machine could give)\n", program);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: the run failed: %s\n", program, escape_control(e.what()).c_str());
    return 1;
  }
}

int64_t parse_int(const std::string& what, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw UsageError(fmt::format("{} must be an integer (got '{}')", what, text));
  }
  return v;
}

int64_t Flags::get_int(const std::string& name, int64_t def, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const int64_t v = parse_int("--" + name, it->second);
  check_range(name, v, min, max);
  return v;
}

void check_range(const std::string& name, int64_t v, int64_t min, int64_t max) {
  if (v < min || v > max) throw UsageError(fmt::format("--{} must be in [{}, {}] (got {})", name, min, max, v));
}

double Flags::get_double(const std::string& name, double def, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    throw UsageError(fmt::format("--{} must be a finite number (got '{}')", name, it->second));
  }
  if (v < min || v > max) {
    throw UsageError(fmt::format("--{} must be in [{}, {}] (got {})", name, min, max, it->second));
  }
  return v;
}

bool Flags::get_bool(const std::string& name, bool def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  throw UsageError(fmt::format("--{} must be true or false (got '{}')", name, it->second));
}

std::string Flags::get_string(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (it->second.empty()) throw UsageError(fmt::format("--{} must not be empty", name));
  return it->second;
}

std::string Flags::get_choice(const std::string& name, const std::string& def,
                              const std::vector<std::string>& choices) const {
  const std::string v = get_string(name, def);
  for (const std::string& c : choices) {
    if (v == c) return v;
  }
  throw UsageError(fmt::format("--{} must be one of {} (got '{}')", name, fmt::join(choices, "|"), v));
}

std::vector<int64_t> Flags::get_int_list(const std::string& name, const std::vector<int64_t>& def, int64_t min,
                                         int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  std::vector<int64_t> out;
  size_t start = 0;
  const std::string& s = it->second;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const int64_t v = parse_int("--" + name + " entries", item);
    if (v < min || v > max) {
      throw UsageError(fmt::format("--{} entries must be in [{}, {}] (got {})", name, min, max, v));
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace ddplab
