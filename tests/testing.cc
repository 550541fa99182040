#include "tests/testing.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <zlib.h>

#include "src/base/compare.h"

namespace ddplab::testing {

json load_json(const std::string& path) {
  if (std::ifstream in(path); in) return json::parse(in);
  // A large golden is stored as PATH.gz (tests/golden/models/make_model_goldens.py, compress_if_large).
  gzFile gz = gzopen((path + ".gz").c_str(), "rb");
  if (!gz) throw std::runtime_error("cannot open golden file " + path + " (nor " + path + ".gz)");
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(gz, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(gz);
  if (n < 0) throw std::runtime_error("golden file " + path + ".gz: not a readable gzip file");
  return json::parse(text);
}

static void flatten(const json& j, std::vector<float>& out) {
  if (j.is_array()) {
    for (const json& e : j) flatten(e, out);
  } else {
    out.push_back(static_cast<float>(j.get<double>()));
  }
}

std::vector<float> floats(const json& j) {
  std::vector<float> out;
  flatten(j, out);
  return out;
}

std::vector<int64_t> ints(const json& j) {
  if (!j.is_array()) return {j.get<int64_t>()};
  std::vector<int64_t> out;
  for (const json& e : j) {
    const std::vector<int64_t> part = ints(e);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

static std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int bind_loopback(int type_flags, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | type_flags, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int free_port() {
  int port = 0;
  close(bind_loopback(0, &port));
  return port;
}

bool wait_for_listener(int port, double seconds) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < static_cast<int>(seconds * 50); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool up = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (up) return true;
    usleep(20000);
  }
  return false;
}

std::string temp_dir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/ddplab.XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

namespace {
std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult run_oracle(const std::vector<std::string>& argv, const std::vector<std::string>& inputs,
                         const std::string& out) {
  const char* dir = std::getenv("DDPLAB_ORACLE_CACHE");
  if (!dir || !*dir) return run_command(argv);
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the command line and the inputs' bytes
  const auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // a separator no byte string ends with
  };
  for (const std::string& a : argv) mix(a == out ? std::string("<out>") : a);  // the output path is not the question
  for (const std::string& f : inputs) mix(f), mix(read_all(f));
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  const std::string cached = std::string(dir) + "/" + key;
  if (std::ifstream(cached).good()) {
    std::ofstream(out, std::ios::binary) << read_all(cached);
    CommandResult r;
    r.status = 0;
    r.out = "(the oracle's output of an earlier identical run, DDPLAB_ORACLE_CACHE)\n";
    return r;
  }
  CommandResult r = run_command(argv);
  if (r.status == 0 && std::ifstream(out).good()) {
    const std::string tmp = cached + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary) << read_all(out);
    std::rename(tmp.c_str(), cached.c_str());
  }
  return r;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  const std::string dir = temp_dir();
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  std::fflush(stdout);  // else the child's freopen flushes our pending output a second time
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) _exit(127);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  CommandResult r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.max_rss_kb = usage.ru_maxrss;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

bool torch_available() {
  static const bool ok = [] {
    if (access("/usr/bin/python3", X_OK) != 0) return false;
    return run_command({"/usr/bin/python3", "-c", "import torch"}).status == 0;
  }();
  return ok;
}

std::string torch2_python() {
  const char* env = std::getenv("DDPLAB_TORCH2_VENV");
  return std::string(env && *env ? env : "/opt/ddplab-torch2") + "/bin/python";
}

std::string python_for(const std::string& torch) { return torch == "torch1.13" ? "/usr/bin/python3" : torch2_python(); }

std::string torch_unavailable(const std::string& torch) {
  if (torch == "torch1.13") return torch_available() ? "" : "/usr/bin/python3 cannot import torch";
  const std::string py = torch2_python();
  if (access(py.c_str(), X_OK) != 0) return py + " is absent: run tools/install_deps.sh --with-torch2";
  static const int status = run_command({py, "-c", "import torch"}).status;
  return status == 0 ? "" : py + " cannot import torch";
}

Match match(const std::string& label, const std::vector<float>& got, const std::vector<float>& want, double rtol,
            double atol) {
  Match m;
  if (got.size() != want.size()) {
    std::printf("%s: size %zu, expected %zu\n", label.c_str(), got.size(), want.size());
    m.allclose = false;
    m.total = static_cast<int64_t>(want.size());
    return m;
  }
  const CmpResult r = cmp(label, got.data(), want.data(), static_cast<int64_t>(got.size()), rtol, atol);
  m.total = r.numel;
  m.equal = r.numel - r.num_different;
  m.maxdiff = r.maxdiff;
  m.allclose = r.approximate;
  std::printf("%-40s %lld/%lld bitwise equal, allclose %s, maxdiff %s\n", label.c_str(),
              static_cast<long long>(m.equal), static_cast<long long>(m.total), m.allclose ? "yes" : "NO",
              python_float_repr(m.maxdiff).c_str());
  return m;
}

static int64_t ordered_bits(float f) {  // float bits on a line where neighbouring floats differ by one
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}

Bits bits(const std::vector<float>& got, const std::vector<float>& want) {
  Bits b;
  if (got.size() != want.size()) {
    b.sizes_match = false;
    return b;
  }
  b.total = static_cast<int64_t>(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) {
      ++b.equal;
    } else {
      b.worst = std::max<int64_t>(b.worst, std::llabs(ordered_bits(got[i]) - ordered_bits(want[i])));
      if (b.worst == 0) b.worst = 1;  // NaN payloads, or 0 and -0
    }
  }
  return b;
}

Bits print_bits(const std::string& label, const std::vector<float>& got, const std::vector<float>& want, int width,
                bool print) {
  const Bits b = bits(got, want);
  if (!print) return b;
  if (!b.sizes_match) {
    std::printf("%-*s size %zu, expected %zu\n", width, label.c_str(), got.size(), want.size());
  } else {
    std::printf("%-*s exact %s %lld/%lld bitwise, max ulps %lld\n", width, label.c_str(), b.exact() ? "yes" : "NO",
                static_cast<long long>(b.equal), static_cast<long long>(b.total), static_cast<long long>(b.worst));
  }
  return b;
}

int64_t max_ulps(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INT64_MAX;
  // Map the sign-magnitude bits onto a line where adjacent floats are adjacent integers.
  const auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  int64_t worst = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(got[k]) != std::isnan(want[k])) return INT64_MAX;
    if (std::isnan(got[k])) continue;
    worst = std::max(worst, std::abs(ordered(got[k]) - ordered(want[k])));
  }
  return worst;
}

json sim_dump(std::vector<std::string> args) {
  const std::string out = temp_dir() + "/dump.json";
  args.insert(args.begin(), "sim/ddp_sim");
  for (const char* a : {"--quiet", "--dump-params"}) args.push_back(a);
  args.push_back(out);
  const CommandResult r = run_command(args);
  EXPECT_EQ(r.status, 0) << r.err;
  return load_json(out);
}

void expect_bitwise(const std::string& label, const json& got, const json& want) {
  for (const auto& [name, w] : want.items()) {
    ASSERT_TRUE(got.contains(name)) << label << ": no " << name;
    if (w.is_number_integer()) {
      EXPECT_EQ(got[name], w) << label << " " << name;
      continue;
    }
    const auto m = match(label + " " + name, floats(got[name]), floats(w));
    EXPECT_EQ(m.equal, m.total) << label << " " << name << " is not bitwise torch's";
  }
}

void expect_dump_bitwise(const std::string& label, const json& got, const json& torch) {
  EXPECT_EQ(got["sampler_indices"], torch["sampler_indices"]) << label;
  ASSERT_EQ(got["replicas"].size(), torch["replicas"].size()) << label;
  for (size_t r = 0; r < torch["replicas"].size(); ++r) {
    const std::string rank = label + " rank" + std::to_string(r);
    expect_bitwise(rank, got["replicas"][r], torch["replicas"][r]);
    if (torch.contains("buffers")) expect_bitwise(rank + " buffer", got["buffers"][r], torch["buffers"][r]);
    const auto m = match(rank + " losses", floats(got["losses"][r]), floats(torch["losses"][r]));
    EXPECT_EQ(m.equal, m.total) << rank << ": losses are not bitwise torch's";
  }
  EXPECT_EQ(got.value("test_correct", json()), torch.value("test_correct", json()))
      << label << ": test predictions differ";
}

}  // namespace ddplab::testing
