// Output files and run sizes at their edges (issue 9): the atomic write never replaces a link, device or
// pipe; output paths are refused before the work; oversized runs are refused up front with the numbers;
// every program turns any exception into one line and a status in 0/1/2/3.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/base/io.h"
#include "src/base/limits.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicWrite, FollowsASymbolicLinkAndKeepsIt) {
  const std::string dir = testing::temp_dir();
  const std::string target = dir + "/target.json", link = dir + "/link.json";
  ASSERT_EQ(symlink("target.json", link.c_str()), 0);  // relative, as `ln -s` makes it
  EXPECT_EQ(write_file_atomic(link, "{}\n"), "");
  struct stat st {};
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a regular file";
  EXPECT_EQ(read(target), "{}\n");
}

TEST(AtomicWrite, WritesThroughAPipeInsteadOfReplacingIt) {
  // A character device (/dev/null) takes the same branch; a FIFO is one a test may create and break.
  const std::string fifo = testing::temp_dir() + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read(fifo); });
  EXPECT_EQ(write_file_atomic(fifo, "through the pipe\n"), "");
  reader.join();
  EXPECT_EQ(got, "through the pipe\n");
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the pipe was replaced by a regular file";
  EXPECT_EQ(check_writable("/dev/null"), "");
}

TEST(AtomicWrite, RefusesBeforeTheWorkWhatItCouldNotWriteAfter) {
  const std::string dir = testing::temp_dir();
  EXPECT_EQ(check_writable(dir), "'" + dir + "' is a directory, not a file");
  EXPECT_EQ(check_writable(dir + "/"), "'" + dir + "/' is a directory, not a file");
  EXPECT_NE(check_writable(dir + "/" + std::string(250, 'a')).find("is 250 bytes long; the limit is 244"),
            std::string::npos);
  EXPECT_EQ(check_writable(dir + "/" + std::string(244, 'a')), "");
  EXPECT_NE(check_writable(dir + "/no/such/dir/x.json").find("does not exist"), std::string::npos);
  const std::string loop = dir + "/loop";
  ASSERT_EQ(symlink("loop", loop.c_str()), 0);
  EXPECT_NE(check_writable(loop).find("a loop of symbolic links"), std::string::npos);
  // Nothing was left behind by the refusals.
  EXPECT_EQ(std::system(("test $(ls -A " + dir + " | wc -l) -eq 1").c_str()), 0);
}

// Issue 19, cause 3: every output was created 0644 whatever the umask, and a replaced 0600 file became 0644.
TEST(AtomicWrite, NewFilesHonourTheUmaskAndReplacedFilesKeepTheirMode) {
  const std::string dir = testing::temp_dir();
  const mode_t old = umask(077);
  const std::string fresh = dir + "/fresh.json";
  EXPECT_EQ(write_file_atomic(fresh, "{}\n"), "");
  umask(022);
  const std::string kept = dir + "/kept.json";
  std::ofstream(kept) << "old\n";
  ASSERT_EQ(chmod(kept.c_str(), 0600), 0);
  EXPECT_EQ(write_file_atomic(kept, "new\n"), "");
  const std::string other = dir + "/other.json";
  EXPECT_EQ(write_file_atomic(other, "{}\n"), "");
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a new file under umask 077";
  ASSERT_EQ(stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a replaced 0600 file";
  EXPECT_EQ(read(kept), "new\n");
  ASSERT_EQ(stat(other.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "a new file under umask 022";
}

// Issue 19, cause 4: /dev/stdout (a link to /proc/self/fd/1, whose target is "pipe:[N]" or the file stdout was
// redirected to) was resolved by hand: a pipe gave "cannot create a temporary file beside", a regular file was
// renamed over, losing what the program had printed. Paths naming an open descriptor are written through it.
TEST(AtomicWrite, DevStdoutIsWrittenThroughNeverRenamedOver) {
  const std::string dir = testing::temp_dir();
  for (const char* kind : {"file", "pipe"}) {
    SCOPED_TRACE(kind);
    const std::string out = dir + "/out." + kind;
    if (std::string(kind) == "pipe") {
      ASSERT_EQ(mkfifo(out.c_str(), 0600), 0);
    }
    // A child whose stdout is `out`: it prints a line, then writes through /dev/stdout, /dev/fd/1 and
    // /proc/self/fd/1, then a last line.
    std::string got;
    std::thread reader;
    if (std::string(kind) == "pipe") reader = std::thread([&] { got = read(out); });
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      if (!freopen(out.c_str(), "w", stdout)) _exit(3);
      std::printf("before\n");
      std::string why;
      for (const char* p : {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
        why += check_writable(p);
        why += write_file_atomic(p, std::string(p) + "\n");
      }
      std::printf("after\n");
      std::fflush(stdout);
      if (!why.empty()) std::fprintf(stderr, "%s\n", why.c_str());
      _exit(why.empty() ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (reader.joinable()) reader.join();
    if (std::string(kind) == "file") got = read(out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(got, "before\n/dev/stdout\n/dev/fd/1\n/proc/self/fd/1\nafter\n");
    struct stat st {};
    ASSERT_EQ(lstat(out.c_str(), &st), 0);
    EXPECT_EQ(std::string(kind) == "pipe", S_ISFIFO(st.st_mode));
  }
  EXPECT_EQ(std::system(("test $(ls -A " + dir + " | wc -l) -eq 2").c_str()), 0) << "a temporary file was left";
}

TEST(Limits, OversizedRunsAreRefusedWithTheNumbers) {
  ddp::Config c;
  c.layers = {65536, 65536};  // 4.3e9 parameters: the runaway
  try {
    ddp::validate(c);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("parameters x replicas = 4295032832 x 2 = 8590065664 exceeds the ceiling "
                                         "of 268435456"),
              std::string::npos)
        << e.what();
  }
  c.layers = {65536, 2};
  c.samples = 4194304;
  EXPECT_THROW(ddp::validate(c), UsageError);
  // The bench's large model (8 replicas of MLP 1024-4096-4096-1024, 25M parameters each) stays allowed.
  c = ddp::Config{};
  c.layers = {1024, 4096, 4096, 1024};
  c.world_size = 8;
  c.samples = 512;
  c.batch_size = 64;
  EXPECT_NO_THROW(ddp::validate(c));
}

TEST(Limits, AFootprintOverTheFreeMemoryIsRefused) {
  const double avail = available_memory_bytes();
  if (avail <= 0) GTEST_SKIP() << "/proc/meminfo has no MemAvailable here";
  Footprint f;
  f.parameters = kMaxParameterElements / 2;                           // under every ceiling...
  f.copies = static_cast<int64_t>(avail / (2.0 * f.parameters)) + 8;  // ...but more bytes than are free
  try {
    check_footprint(f, "--test");
    FAIL() << "accepted " << f.bytes() << " bytes with " << avail << " available";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("GiB available"), std::string::npos) << e.what();
  }
}

TEST(Limits, ProgramsRefuseOversizedRunsAtOnce) {
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"sim/ddp_sim", "--samples", "4194304", "--layers", "65536,2"},
        std::vector<std::string>{"sim/ddp_sim", "--layers", "65536,65536"},
        std::vector<std::string>{"sim/two_replica", "--in-features", "65536", "--hidden", "65536"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::run_command(cmd);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 2) << cmd[0] << "\n" << r.err;
    EXPECT_NE(r.err.find("exceeds the ceiling"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line\n" << r.err;
    EXPECT_LT(s, 5.0) << "refused before allocating, not after";
  }
}

int throws_bad_alloc(int, char**) { throw std::bad_alloc(); }
int throws_runtime_error(int, char**) { throw std::runtime_error("something broke"); }
int throws_usage(int, char**) { throw UsageError("--x must be 1"); }
int throws_control_bytes(int, char**) { throw UsageError("--lr must be a finite number (got '0.1\nall good\x1b[2J')"); }

TEST(GuardedMain, EveryExceptionBecomesOneLineAndAStatus) {
  char prog[] = "p";
  char* argv[] = {prog, nullptr};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(guarded_main("p", 1, argv, throws_bad_alloc), 1);
  EXPECT_EQ(guarded_main("p", 1, argv, throws_runtime_error), 1);
  EXPECT_EQ(guarded_main("p", 1, argv, throws_usage), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "p: out of memory (the run needed more than this machine could give)\n"
            "p: the run failed: something broke\n"
            "p: --x must be 1\n");
}

// Issue 19, cause 5: a newline in a flag value split the error into two lines, and terminal escapes reached
// stderr raw. Every error line is printed with its control bytes escaped.
TEST(GuardedMain, ControlBytesInAnErrorAreEscaped) {
  char prog[] = "p";
  char* argv[] = {prog, nullptr};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(guarded_main("p", 1, argv, throws_control_bytes), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "p: --lr must be a finite number (got '0.1\\nall good\\x1b[2J')\n");
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"sim/ddp_sim", "--lr", "0.1\nall good"},
                                              std::vector<std::string>{"sim/ddp_sim", "--activation", "\x1b[2Jred"}}) {
    const auto r = testing::run_command(cmd);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line\n" << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ddplab
