// What the unit tests that talk HTTP to a server of their own on loopback share: the
// listening socket, a port nothing listens on, and reading one request off a connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace pg_outbox::loopback {

// A listening TCP socket on 127.0.0.1, on a port the kernel chose (returned in port).
inline int listening_socket(int& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(fd, 64) != 0)
    throw std::runtime_error("cannot listen on loopback");
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

// A loopback port nothing listens on: connecting to it is refused at once.
inline int unused_port() {
  int port = 0;
  close(listening_socket(port));
  return port;
}

// Reads one request (its head and a Content-Length body) from fd into request; what came
// after it stays in buffer for the next call. False when the connection ends first.
inline bool read_request(int fd, std::string& buffer, std::string& request) {
  char chunk[4096];
  auto more = [&] {
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  };
  size_t end = buffer.find("\r\n\r\n");
  while (end == std::string::npos) {
    if (!more()) return false;
    end = buffer.find("\r\n\r\n");
  }
  size_t length = 0;
  const auto at = buffer.find("Content-Length: ");
  if (at != std::string::npos && at < end) length = std::stoul(buffer.substr(at + 16));
  while (buffer.size() < end + 4 + length)
    if (!more()) return false;
  request = buffer.substr(0, end + 4 + length);
  buffer.erase(0, end + 4 + length);
  return true;
}

}  // namespace pg_outbox::loopback
