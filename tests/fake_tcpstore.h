// A fake PyTorch 2.x TCPStore server for tests, written from a reading of PyTorch 2.x's
// TCPStoreBackend.cpp / TCPStoreLibUvBackend.cpp (not a live 2.x store, which Debian does not ship): every
// connection must open with VALIDATE (type 0, uint32 magic 0x3C85F7CE), then SET 1, GET 3, CHECK 5 and,
// when `ping` (later 2.x), PING 13 (the uint32 nonce echoed). Like PyTorch's classic server, it drops a
// connection on an unknown query type (earlier 2.x did so for PING) or a GET of a missing key.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing.h"

namespace ddplab::testing {

class FakeTcpStore2 {
 public:
  explicit FakeTcpStore2(bool ping) : ping_(ping) {
    listen_fd_ = bind_loopback(0, &port_);
    if (listen_fd_ < 0 || listen(listen_fd_, 64) != 0) {
      port_ = 0;
      return;
    }
    accept_ = std::thread([this] {
      while (!stop_) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (poll(&p, 1, 50) != 1) continue;
        const int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) continue;
        std::lock_guard<std::mutex> lock(mu_);
        fds_.push_back(fd);
        conns_.emplace_back([this, fd] { serve(fd); });
      }
    });
  }
  ~FakeTcpStore2() {
    stop_ = true;
    if (accept_.joinable()) accept_.join();
    std::vector<std::thread> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();
    for (int fd : fds_) close(fd);
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  int port() const { return port_; }
  int pings() const { return pings_; }
  int unvalidated() const { return unvalidated_; }
  std::string value(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    return it == kv_.end() ? "<missing>" : it->second;
  }

 private:
  static bool read_exact(int fd, void* out, size_t n) {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = recv(fd, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  static bool send_all(int fd, const std::string& s) {
    return send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  static bool read_u64(int fd, uint64_t* v) { return read_exact(fd, v, 8); }  // little-endian hosts
  static bool read_str(int fd, std::string* s) {
    uint64_t n = 0;
    if (!read_u64(fd, &n) || n > (1u << 24)) return false;
    s->resize(n);
    return read_exact(fd, s->data(), n);
  }

  void serve(int fd) {
    uint8_t type = 0;
    uint32_t magic = 0;
    if (!read_exact(fd, &type, 1)) return;
    if (type != 0) {  // the first query must be VALIDATE; ddplab's probes for 1.x (CHECK, 4) and Redis ('*') aside
      if (type != 4 && type != '*') ++unvalidated_;
      shutdown(fd, SHUT_RDWR);
      return;
    }
    if (!read_exact(fd, &magic, 4) || magic != 0x3C85F7CEu) {
      shutdown(fd, SHUT_RDWR);
      return;
    }
    while (read_exact(fd, &type, 1)) {
      std::string key, value;
      uint64_t n = 0;
      if (type == 1) {  // SET
        if (!read_str(fd, &key) || !read_str(fd, &value)) break;
        std::lock_guard<std::mutex> lock(mu_);
        kv_[key] = value;
      } else if (type == 3) {  // GET
        if (!read_str(fd, &key)) break;
        std::unique_lock<std::mutex> lock(mu_);
        auto it = kv_.find(key);
        if (it == kv_.end()) break;
        std::string reply(8, '\0');
        const uint64_t len = it->second.size();
        std::memcpy(reply.data(), &len, 8);
        reply += it->second;
        lock.unlock();
        if (!send_all(fd, reply)) break;
      } else if (type == 5) {  // CHECK
        if (!read_u64(fd, &n) || n > 1024) break;
        bool all = true, ok = true;
        for (uint64_t i = 0; ok && i < n; ++i) {
          ok = read_str(fd, &key);
          std::lock_guard<std::mutex> lock(mu_);
          all = all && kv_.count(key) > 0;
        }
        if (!ok || !send_all(fd, std::string(1, all ? '\0' : '\1'))) break;
      } else if (type == 13 && ping_) {  // PING
        if (!read_exact(fd, &magic, 4)) break;
        ++pings_;
        if (!send_all(fd, std::string(reinterpret_cast<const char*>(&magic), 4))) break;
      } else {
        break;  // unknown query type: drop the connection
      }
    }
    shutdown(fd, SHUT_RDWR);
  }

  const bool ping_;
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> pings_{0}, unvalidated_{0};
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
  std::vector<int> fds_;
  std::vector<std::thread> conns_;
  std::thread accept_;
};

}  // namespace ddplab::testing
