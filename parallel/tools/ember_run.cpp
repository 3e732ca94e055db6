// ember-run: starts N copies of a program on this machine, one per GPU, the way
// torchrun does: each child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR/MASTER_PORT and EMBER_RENDEZVOUS_DIR (a fresh folder through which
// rank 0 hands the NCCL unique id to the others; init_process_group() reads all
// of it), and NCCL_NVLS_ENABLE=0 unless set. If a child fails, the others are
// stopped; the exit status is the first failure's.
//   ember-run --nproc 2 ./build/examples/train_ddp --steps 100
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ember-run --nproc N [--master-port P] program [args...]\n"
               "  starts N processes of `program` with RANK, WORLD_SIZE, LOCAL_RANK,\n"
               "  LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and EMBER_RENDEZVOUS_DIR set\n");
  return 2;
}

// A port that was free a moment ago, for MASTER_PORT.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 0, port = 0, first = 1;
  for (; first < argc; ++first) {
    std::string a = argv[first];
    if ((a == "--nproc" || a == "--nproc_per_node") && first + 1 < argc) {
      nproc = std::atoi(argv[++first]);
    } else if (a == "--master-port" && first + 1 < argc) {
      port = std::atoi(argv[++first]);
    } else if (a == "--") {
      ++first;
      break;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "ember-run: unknown option %s\n", a.c_str());
      return usage();
    } else {
      break;
    }
  }
  if (nproc < 1 || first >= argc) return usage();
  if (port == 0) port = free_port();

  char dir_template[] = "/tmp/ember-run-XXXXXX";
  if (!mkdtemp(dir_template)) {
    std::perror("ember-run: mkdtemp");
    return 1;
  }
  const std::string dir = dir_template;

  std::vector<pid_t> children;
  for (int rank = 0; rank < nproc; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("ember-run: fork");
      for (pid_t c : children) kill(c, SIGTERM);
      return 1;
    }
    if (pid == 0) {
      const std::string r = std::to_string(rank), n = std::to_string(nproc);
      setenv("RANK", r.c_str(), 1);
      setenv("LOCAL_RANK", r.c_str(), 1);
      setenv("WORLD_SIZE", n.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("EMBER_RENDEZVOUS_DIR", dir.c_str(), 1);
      // NVLink SHARP (NVLS) multicast stays off unless the user turns it on.
      setenv("NCCL_NVLS_ENABLE", "0", 0);
      execvp(argv[first], argv + first);
      std::fprintf(stderr, "ember-run: cannot start %s: %s\n", argv[first], std::strerror(errno));
      _exit(127);
    }
    children.push_back(pid);
  }

  // Wait for all; after the first failure give the rest 10 s, then stop them.
  int status_out = 0, running = nproc;
  bool stopping = false;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --running;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      for (size_t i = 0; i < children.size(); ++i)
        if (children[i] == pid) {
          children[i] = -1;
          if (code != 0 && status_out == 0) {
            std::fprintf(stderr, "ember-run: rank %zu exited with status %d\n", i, code);
            status_out = code;
            stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          }
        }
      continue;
    }
    if (pid < 0) break;
    if (!stopping && std::chrono::steady_clock::now() >= stop_at) {
      stopping = true;
      std::fprintf(stderr, "ember-run: stopping the remaining ranks\n");
      for (pid_t c : children)
        if (c > 0) kill(c, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return status_out;
}
