// The Gloo backend (Debian's libgloo, 2022 API): TCP transport, rendezvous through the store
// (src/store/store.h: a directory on one host, a Redis server across hosts). Collectives are Gloo's own:
// all_reduce is its ring. Every address Gloo reads from the store is checked before it connects.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/comm/communicator.h"
#include "src/store/store.h"

namespace ddplab::dist {

// --bind: the numeric address of ADDR (a host name or address of this machine) that a socket can listen
// on; throws UsageError "--bind 'x' does not resolve: ..." or "... is not an address of this machine".
std::string resolve_bind(const std::string& address);

// Gloo's network thread enforces what a peer sends, and its exception escapes that thread ("[enforce fail
// at ./gloo/transport/tcp/pair.cc:488] it != localPendingRecv_.end()."). Given such a text, the line that says
// it in ddplab's words: "rank 1's connection broke the Gloo protocol (...)", naming the peer where this rank
// has one (Gloo does not say which pair threw), with Gloo's text as a trailing detail. "" for other texts.
std::string gloo_protocol_broken(const std::string& what, int rank, int world_size);

std::unique_ptr<comm::Communicator> connect_gloo(std::shared_ptr<Store> store, int rank, int world_size,
                                                 const std::string& bind_address, std::chrono::milliseconds timeout);

}  // namespace ddplab::dist
