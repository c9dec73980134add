#include "src/server/observability/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "src/server/observability/metric_families.h"

namespace exposure_filter {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// btime (seconds since the epoch when the system booted) from /proc/stat.
double BootTime() {
  std::istringstream in(ReadFile("/proc/stat"));
  std::string line;
  while (std::getline(in, line)) {
    double t = 0;
    if (line.rfind("btime ", 0) == 0 && absl::SimpleAtod(line.substr(6), &t)) {
      return t;
    }
  }
  return 0;
}

uint64_t CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // minus the descriptor opendir holds
}

}  // namespace

std::optional<ProcessStats> ParseProcStat(absl::string_view stat,
                                          long ticks_per_second, long page_size,
                                          double boot_time) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // fields are counted from the last ')'.
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos || ticks_per_second <= 0) {
    return std::nullopt;
  }
  std::vector<absl::string_view> f =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state); field N is f[N - 3] (proc(5), 1-based).
  auto field = [&](int n, uint64_t* out) {
    return static_cast<int>(f.size()) > n - 3 &&
           absl::SimpleAtoi(f[n - 3], out);
  };
  uint64_t utime = 0, stime = 0, threads = 0, start = 0, vsize = 0, rss = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(20, &threads) ||
      !field(22, &start) || !field(23, &vsize) || !field(24, &rss)) {
    return std::nullopt;
  }
  ProcessStats s;
  const double hz = static_cast<double>(ticks_per_second);
  s.cpu_seconds = static_cast<double>(utime + stime) / hz;
  s.threads = threads;
  s.start_time_seconds = boot_time + static_cast<double>(start) / hz;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * static_cast<uint64_t>(page_size);
  return s;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  static const double boot_time = BootTime();
  std::optional<ProcessStats> s =
      ParseProcStat(ReadFile("/proc/self/stat"), sysconf(_SC_CLK_TCK),
                    sysconf(_SC_PAGESIZE), boot_time);
  if (!s.has_value()) return {};
  std::vector<prometheus::MetricFamily> out;
  auto add = [&](const char* name, const char* help, MetricType type,
                 double value) {
    out.push_back(MakeFamily(name, help, type));
    AddSample(out.back(), {}, value);
  };
  add("process_cpu_seconds_total",
      "Total user and system CPU time spent in seconds.", MetricType::Counter,
      s->cpu_seconds);
  add("process_resident_memory_bytes", "Resident memory size in bytes.",
      MetricType::Gauge, static_cast<double>(s->resident_bytes));
  add("process_virtual_memory_bytes", "Virtual memory size in bytes.",
      MetricType::Gauge, static_cast<double>(s->virtual_bytes));
  add("process_start_time_seconds",
      "Start time of the process since unix epoch in seconds.",
      MetricType::Gauge, s->start_time_seconds);
  add("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
      static_cast<double>(CountOpenFds()));
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    add("process_max_fds", "Maximum number of open file descriptors.",
        MetricType::Gauge, static_cast<double>(limit.rlim_cur));
  }
  add("process_threads", "Number of OS threads in the process.",
      MetricType::Gauge, static_cast<double>(s->threads));
  return out;
}

}  // namespace exposure_filter
