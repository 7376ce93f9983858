// --plot: bandwidth and latency against size, one line per test and mode of each result file,
// two charts side by side in one PNG, drawn by gnuplot.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "client/oob.h"
#include "perf/report.h"

namespace nfp {

std::string find_gnuplot() {
  const char* path = getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= p.size()) {
    size_t end = p.find(':', at);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(at, end - at);
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/gnuplot";
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0)
      return cand;
    at = end + 1;
  }
  return "";
}

namespace {

// A gnuplot single-quoted string.
std::string gq(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::string short_size(size_t n) {
  char b[32];
  if (n >= GiB && n % GiB == 0)
    snprintf(b, sizeof(b), "%zuG", n / GiB);
  else if (n >= MiB && n % MiB == 0)
    snprintf(b, sizeof(b), "%zuM", n / MiB);
  else if (n >= KiB && n % KiB == 0)
    snprintf(b, sizeof(b), "%zuK", n / KiB);
  else
    snprintf(b, sizeof(b), "%zu", n);
  return b;
}

std::string stem(const std::string& path) {
  std::string s = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  const size_t dot = s.rfind('.');
  if (dot != std::string::npos && dot > 0) s = s.substr(0, dot);
  return s;
}

struct Series {
  std::string title;
  std::string test;
  std::vector<std::pair<size_t, std::pair<double, double>>> pts;  // size -> (GB/s, time us)
};

}  // namespace

int run_plot(const std::string& png, const std::vector<std::string>& files,
             const std::vector<Result>* own, int timeout_s) {
  // Every input first: a bad file is reported before gnuplot is looked for.
  std::vector<Series> series;
  std::map<std::string, size_t> index;
  auto add_rows = [&](const std::vector<Result>& rows, const std::string& label) {
    for (const Result& r : rows) {
      const std::string title = (label.empty() ? "" : label + " ") + r.mode + " " + r.test;
      auto it = index.find(title);
      if (it == index.end()) {
        it = index.emplace(title, series.size()).first;
        series.push_back(Series{title, r.test, {}});
      }
      series[it->second].pts.push_back({r.size, {r.gbps, r.time_us}});
    }
  };
  for (const std::string& f : files) {
    std::vector<Result> rows;
    std::string err;
    if (!read_results(f, &rows, &err)) {
      fprintf(stderr, "%s: --plot: %s\n", kProg, err.c_str());
      return kExitFail;
    }
    add_rows(rows, files.size() > 1 ? stem(f) : "");
  }
  if (own != nullptr) add_rows(*own, "");
  if (series.empty()) {
    fprintf(stderr, "%s: --plot: no results to plot\n", kProg);
    return kExitFail;
  }
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    fprintf(stderr,
            "%s: --plot needs gnuplot, which is not in PATH; install it (e.g. apt-get install "
            "gnuplot-nox) or plot the --csv/--json output another way\n",
            kProg);
    return kExitFail;
  }

  std::set<size_t> sizes;
  bool any_bw = false, any_lat = false;
  for (Series& s : series) {
    std::sort(s.pts.begin(), s.pts.end());
    for (const auto& p : s.pts) sizes.insert(p.first);
    any_bw = any_bw || s.test != "lat";
    any_lat = any_lat || s.test == "lat";
  }

  std::string sc;
  sc +=
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      "  set terminal pngcairo size 1400,560 font 'sans,10'\n"
      "} else {\n"
      "  set terminal png size 1400,560\n"
      "}\n"
      "set termoption noenhanced\n";
  sc += "set output " + gq(png) + "\n";
  for (size_t i = 0; i < series.size(); ++i) {
    sc += "$d" + std::to_string(i) + " << EOD\n";
    for (const auto& p : series[i].pts) {
      char line[128];
      snprintf(line, sizeof(line), "%zu %.9g %.9g\n", p.first, p.second.first, p.second.second);
      sc += line;
    }
    sc += "EOD\n";
  }
  // Size labels on the x axis, thinned to about a dozen.
  std::string tics;
  const size_t step = (sizes.size() + 11) / 12;
  size_t k = 0;
  for (size_t s : sizes) {
    if (k++ % step != 0) continue;
    tics += (tics.empty() ? "" : ", ") + gq(short_size(s)) + " " + std::to_string(s);
  }
  sc += "set multiplot layout 1,2 title " + gq(std::string(kProg) + ": " + png) + "\n";
  sc +=
      "set logscale x 2\nset xtics (" + tics +
      ")\nset xlabel 'message size (bytes)'\n"
      "set grid\nset key top left box opaque\nset offsets graph 0.03, graph 0.03, graph 0.05, 0\n";
  auto plot = [&](bool bw_panel, bool filter) {
    std::string cmd = "plot ";
    bool first = true;
    for (size_t i = 0; i < series.size(); ++i) {
      const bool is_lat = series[i].test == "lat";
      if (filter && is_lat == bw_panel) continue;
      cmd += std::string(first ? "" : ", ") + "$d" + std::to_string(i) +
             " using 1:" + (bw_panel ? "2" : "3") + " with linespoints lw 2 pt 7 ps 0.8 title " +
             gq(series[i].title);
      first = false;
    }
    return cmd + "\n";
  };
  sc += "set title 'bandwidth'\nset ylabel 'GB/s (1e9 bytes/s)'\nset yrange [0:*]\n";
  sc += plot(true, any_bw);
  sc += "set title " + gq(any_lat ? "latency (one way)" : "time per operation") +
        "\nset ylabel 'us'\nset logscale y 10\nset yrange [*:*]\nset key top left\n";
  sc += plot(false, any_lat);
  sc += "unset multiplot\n";

  char tmpl[] = "/tmp/nccl-fabric-perf-plot-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) {
    fprintf(stderr, "%s: --plot: cannot create a temporary file: %s\n", kProg, strerror(errno));
    return kExitFail;
  }
  const bool written = write(fd, sc.data(), sc.size()) == static_cast<ssize_t>(sc.size());
  close(fd);
  if (!written) {
    unlink(tmpl);
    fprintf(stderr, "%s: --plot: cannot write %s\n", kProg, tmpl);
    return kExitFail;
  }
  unlink(png.c_str());
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    unlink(tmpl);
    fprintf(stderr, "%s: --plot: fork: %s\n", kProg, strerror(errno));
    return kExitFail;
  }
  if (pid == 0) {
    execl(gnuplot.c_str(), "gnuplot", tmpl, static_cast<char*>(nullptr));
    fprintf(stderr, "%s: --plot: cannot run %s: %s\n", kProg, gnuplot.c_str(), strerror(errno));
    _exit(127);
  }
  const int st = nfc::wait_child(pid, timeout_s * 1000);
  unlink(tmpl);
  struct stat out;
  if (st != 0 || stat(png.c_str(), &out) != 0 || out.st_size == 0) {
    fprintf(stderr, "%s: --plot: gnuplot %s; no chart written to %s\n", kProg,
            st < 0 ? "was killed or did not finish in time (see --timeout)"
                   : ("exited with status " + std::to_string(st)).c_str(),
            png.c_str());
    return kExitFail;
  }
  fprintf(stderr, "%s: wrote %s (%zu series)\n", kProg, png.c_str(), series.size());
  return kExitOk;
}

}  // namespace nfp
