// The sockets libcurl waits on, watched with one epoll instance owned by the client.
// libcurl says which sockets to watch (CURLMOPT_SOCKETFUNCTION); a wait is then one
// epoll_wait that returns only the ready sockets, instead of a poll() over every socket
// in flight, and libcurl runs the transfers of those (curl_multi_socket_action).
//
// libcurl removes a connection's socket from the watch list when its transfer ends and adds it
// back when the next transfer reuses the connection, usually within the same pass. The sockets
// of connections are opened and closed through open() and on_close_socket (the easy handles'
// CURLOPT_OPENSOCKETFUNCTION and CURLOPT_CLOSESOCKETFUNCTION), so for those the watch knows
// when a socket number stops naming the same socket and can leave them in epoll while
// unwatched: no epoll_ctl per request. Any other socket libcurl may hand over (e.g. the
// threaded resolver's) is added and removed exactly as asked.
//
// The plain client (plain_client.hpp) shares the epoll instance: its sockets are watched
// through watch_other() and their events go to it, not to libcurl.
#pragma once

#include <curl/curl.h>
#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pg_outbox::http {

// libcurl runs what is due on socket s given the events in ev_bitmask (CURL_SOCKET_TIMEOUT:
// its timeouts). Throws std::runtime_error if the multi handle itself fails.
void socket_action(CURLM* multi, curl_socket_t s, int ev_bitmask);

class SocketWatch {
 public:
  // The owner of sockets that are not libcurl's.
  class Listener {
   public:
    virtual void on_ready(int fd, uint32_t events) = 0;

   protected:
    ~Listener() = default;
  };

  // Throws std::runtime_error if the epoll instance cannot be created.
  SocketWatch();
  ~SocketWatch();
  SocketWatch(const SocketWatch&) = delete;
  SocketWatch& operator=(const SocketWatch&) = delete;

  // See Client::set_wake_fd.
  void set_wake_fd(int fd);

  // Room for every socket of a full wait with this many transfers in flight.
  void size_for(std::size_t max_concurrency);

  // CURLMOPT_SOCKETFUNCTION (user: the SocketWatch): what libcurl waits for on a socket.
  static int on_socket(CURL* easy, curl_socket_t s, int what, void* user, void*);

  // A new connection's socket, opened as libcurl would open it, plus close-on-exec, and
  // noted as one whose closing the watch sees. CURL_SOCKET_BAD if it cannot be opened.
  curl_socket_t open(const curl_sockaddr& address);

  // CURLOPT_CLOSESOCKETFUNCTION (user: the SocketWatch): libcurl closes a connection's socket.
  static int on_close_socket(void* user, curl_socket_t s);

  // Watches a socket that is not libcurl's for events (added, or changed); its events go to
  // listener. Returns 0 or an errno. unwatch_other() must be called before it is closed.
  int watch_other(int fd, uint32_t events, Listener* listener);
  void unwatch_other(int fd);

  // One epoll_wait of at most wait_ms, then libcurl runs the transfers of the ready sockets
  // (and the other sockets' listeners are told).
  // Returns false if the wait was interrupted by a signal or by the wake fd.
  bool wait_and_dispatch(CURLM* multi, int wait_ms);

  // The transfers (easy handle, errno) whose socket could not be added to epoll (ENOMEM,
  // ENOSPC): the client fails them rather than leave them to hang until their timeout.
  // Taking them empties the list.
  std::vector<std::pair<CURL*, int>> take_unwatchable() {
    auto list = std::move(unwatchable_);
    unwatchable_.clear();
    return list;
  }
  void forget_unwatchable() { unwatchable_.clear(); }

 private:
  // What the watch knows about a socket number (sockets_ is indexed by it).
  struct SocketState {
    bool ours = false;        // opened by open(), so on_close_socket sees it closed
    bool wanted = false;      // libcurl currently waits on it
    bool registered = false;  // in epoll's interest list, with the events below
    uint32_t events = 0;
    Listener* other = nullptr;  // not libcurl's: see watch_other
  };

  SocketState& state_of(curl_socket_t s);
  // Adds the socket to epoll, or changes its events. Returns 0 or an errno.
  int watch(curl_socket_t s, SocketState& st, uint32_t wanted_events);
  void unwatch(curl_socket_t s, SocketState& st);

  int epoll_fd_ = -1;  // the sockets libcurl asked us to watch (and idle ones of ours)
  int wake_fd_ = -1;   // the owner's wake-up (see Client::set_wake_fd), or -1
  std::vector<epoll_event> events_;
  std::vector<SocketState> sockets_;  // indexed by socket number
  std::vector<std::pair<CURL*, int>> unwatchable_;
};

}  // namespace pg_outbox::http
