#include "snapshot_wire.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace oobleck::executor {

void run_this_thread_when_idle() {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
}

std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> words;
  std::size_t at = 0;
  while (at < line.size()) {
    const std::size_t end = std::min(line.find(' ', at), line.size());
    if (end > at) words.emplace_back(line.substr(at, end - at));
    at = end + 1;
  }
  return words;
}

std::string WireStream::read_line() {
  for (;;) {
    const std::size_t newline = buffer_.find('\n', at_);
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(at_, newline - at_);
      at_ = newline + 1;
      return line;
    }
    if (buffer_.size() - at_ > 4096) throw std::runtime_error("snapshot server: a request line over 4 KiB");
    buffer_.erase(0, at_);
    at_ = 0;
    char chunk[4096];
    const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error("snapshot server: the connection closed");
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

void WireStream::read_exact(char* out, std::size_t bytes) {
  const std::size_t buffered = std::min(bytes, buffer_.size() - at_);
  std::memcpy(out, buffer_.data() + at_, buffered);
  at_ += buffered;
  for (std::size_t done = buffered; done < bytes;) {
    const ssize_t got = ::recv(fd_, out + done, bytes - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error("snapshot server: the connection closed within a payload");
    done += static_cast<std::size_t>(got);
  }
}

void WireStream::write_all(std::string_view bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t sent = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) throw std::runtime_error(std::string("snapshot server: cannot send: ") + std::strerror(errno));
    done += static_cast<std::size_t>(sent);
  }
}

namespace {

std::string key_words(const SnapshotMemory::Key& k) {
  return k.owner + ' ' + std::to_string(k.step) + ' ' + std::to_string(k.layer) + ' ' + std::to_string(k.degree) +
         ' ' + std::to_string(k.shard);
}

std::string seal_words(const SnapshotSeal& s) {
  return s.owner + ' ' + std::to_string(s.gpu) + ' ' + std::to_string(s.step) + ' ' + std::to_string(s.layer_begin) +
         ' ' + std::to_string(s.layer_end) + ' ' + std::to_string(s.degree) + ' ' + std::to_string(s.shard);
}

}  // namespace

SnapshotClient::SnapshotClient(const std::string& host, int port, const std::string& token, const std::string& role)
    : connection_(channel::connect_to(host, port, std::chrono::seconds(5))), stream_(connection_->fd()) {
  if (role == "worker") spared_.emplace(connection_->fd());
  stream_.write_all("hello " + token + ' ' + role + '\n');
}

void SnapshotClient::put(const SnapshotMemory::Key& key, std::string_view bytes) {
  stream_.write_all("put " + key_words(key) + ' ' + std::to_string(bytes.size()) + '\n');
  stream_.write_all(bytes);
}

bool SnapshotClient::seal(const SnapshotSeal& s) {
  stream_.write_all("seal " + seal_words(s) + '\n');
  return stream_.read_line() == "ok";
}

std::optional<SnapshotClient::Slot> SnapshotClient::claim(const std::string& owner, int gpu, std::size_t bytes) {
  stream_.write_all("claim " + owner + ' ' + std::to_string(gpu) + ' ' + std::to_string(bytes) + '\n');
  const auto w = split_words(stream_.read_line());
  if (w.size() != 5 || w[0] != "slot") return std::nullopt;
  return Slot{std::stoi(w[1]), "/proc/" + w[2] + "/fd/" + w[3], std::stoull(w[4])};
}

bool SnapshotClient::adopt(int slot, const SnapshotSeal& s, const std::vector<std::size_t>& sizes) {
  std::string line = "adopt " + std::to_string(slot) + ' ' + seal_words(s);
  for (std::size_t size : sizes) line += ' ' + std::to_string(size);
  stream_.write_all(line + '\n');
  return stream_.read_line() == "ok";
}

bool SnapshotClient::mirror(const SnapshotSeal& s, const std::vector<SnapshotMemory::Blob>& layers) {
  std::string line = "mirror " + seal_words(s);
  for (const auto& layer : layers) line += ' ' + std::to_string(layer->size());
  stream_.write_all(line + '\n');
  for (const auto& layer : layers) stream_.write_all(*layer);
  return stream_.read_line() == "ok";
}

std::optional<std::string> SnapshotClient::get(const SnapshotMemory::Key& key) {
  stream_.write_all("get " + key_words(key) + '\n');
  const std::string answer = stream_.read_line();
  if (answer == "none") return std::nullopt;
  std::string bytes(std::stoull(answer), '\0');
  stream_.read_exact(bytes.data(), bytes.size());
  return bytes;
}

}  // namespace oobleck::executor
