// Turning nccl-tests logs of forced NCCL_ALGO/NCCL_PROTO pairs into tuner rules: the fastest pair
// per measured size, neighbouring sizes with the same pair merged into one interval.
//
// Choices the interface leaves open:
// - A size measured by only some logs is still ranked, among the pairs that measured it (the
//   comment names the pairs missing there); dropping it would leave the interval's edge to a
//   guess instead of a measurement.
// - A row with #wrong > 0 is no evidence: that pair is left out at that size (the comment says
//   so). A log with no usable row at all is an error, since silently losing a whole pair would
//   hide a broken run. #wrong N/A (nccl-tests -c 0) counts as evidence: timings are still valid.
// - A size that appears twice in one log is an error (two runs pasted together?).
#include "tools/tune/nccltests.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

namespace nf {
namespace tune {
namespace {

const char* coll_label(int coll) { return coll < 0 ? "unknown" : tuner::coll_name(coll); }

std::string us_str(double us) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f us", us);
  return buf;
}

// "1M", "1M,2M,4M", or "1M..64M (7 sizes)" so a comment stays one short line.
std::string size_list(const std::vector<uint64_t>& sizes) {
  if (sizes.size() > 3) {
    return tuner::format_size(sizes.front()) + ".." + tuner::format_size(sizes.back()) + " (" +
           std::to_string(sizes.size()) + " sizes)";
  }
  std::string out;
  for (uint64_t s : sizes) out += (out.empty() ? "" : ",") + tuner::format_size(s);
  return out;
}

std::string shape_str(const NcclTestsLog& l) {
  return std::to_string(l.n_nodes) + " nodes, " + std::to_string(l.n_ranks) + " ranks, " +
         std::to_string(l.ranks_per_node) + " per node";
}

struct Series {
  const NcclTestsLog* log = nullptr;
  std::string name;                 // "ring/ll"
  std::map<uint64_t, double> time;  // usable measurements, us
  std::set<uint64_t> wrong;         // sizes left out for #wrong > 0
};

Status fail(std::string* error, const std::string& msg) {
  if (error != nullptr) *error = msg;
  return Status::kInvalidArgument;
}

Status check_logs(const std::vector<NcclTestsLog>& logs, const CalibrateOptions& opt,
                  std::string* error) {
  if (logs.empty()) return fail(error, "calibrate: no logs");
  if (!std::isfinite(opt.tolerance) || opt.tolerance < 0)
    return fail(error, "calibrate: tolerance must be a non-negative fraction");
  const NcclTestsLog& first = logs[0];
  for (size_t i = 0; i < logs.size(); ++i) {
    const NcclTestsLog& l = logs[i];
    if (l.algo < 0 || l.algo >= tuner::kNumAlgos || l.proto < 0 || l.proto >= tuner::kNumProtos) {
      return fail(error, l.path +
                             ": which algorithm/protocol pair ran is not known (no single "
                             "NCCL_ALGO/NCCL_PROTO line in the log): put --label ALGO/PROTO "
                             "before it");
    }
    if (l.coll < 0 || l.coll >= tuner::kNumColls)
      return fail(error, l.path +
                             ": collective not known (neither the log nor the file name "
                             "names the nccl-tests program)");
    if (l.coll != first.coll) {
      return fail(error, l.path + ": " + coll_label(l.coll) + ", but " + first.path + " is " +
                             coll_label(first.coll));
    }
    if (l.n_nodes != first.n_nodes || l.n_ranks != first.n_ranks ||
        l.ranks_per_node != first.ranks_per_node) {
      return fail(
          error, l.path + ": " + shape_str(l) + ", but " + first.path + " has " + shape_str(first));
    }
    if (opt.exact_shape && l.n_ranks <= 0) {
      return fail(error, l.path +
                             ": no \"# Rank\" lines, so the shape is not known; "
                             "calibrate for any shape instead");
    }
    for (size_t j = 0; j < i; ++j) {
      if (logs[j].algo == l.algo && logs[j].proto == l.proto) {
        return fail(error, l.path + ": " + tuner::pair_name(l.algo, l.proto) + " again (also " +
                               logs[j].path + "); one log per pair");
      }
    }
  }
  return Status::kOk;
}

Status make_series(const NcclTestsLog& l, const CalibrateOptions& opt, Series* s,
                   std::string* error) {
  s->log = &l;
  s->name = tuner::pair_name(l.algo, l.proto);
  std::set<uint64_t> seen;
  bool any_in_place = false;
  for (const NcclTestsRow& r : l.rows) {
    if (!seen.insert(r.bytes).second)
      return fail(error, l.path + ": size " + std::to_string(r.bytes) +
                             " measured twice; give one run per log");
    const double t = opt.use_in_place ? r.ip_time_us : r.time_us;
    const long wrong = opt.use_in_place ? r.ip_wrong : r.wrong;
    if (t < 0) continue;  // no in-place figure on this row
    any_in_place = true;
    if (wrong > 0) {
      s->wrong.insert(r.bytes);
    } else {
      s->time[r.bytes] = t;
    }
  }
  if (opt.use_in_place && !any_in_place)
    return fail(error, l.path + ": no in-place columns to rank by");
  if (s->time.empty())
    return fail(error, l.path + ": every row has #wrong > 0; nothing to calibrate from");
  return Status::kOk;
}

// Index of the fastest series at size, or -1; ties go to the earlier log (deterministic).
int fastest(const std::vector<Series>& series, uint64_t size, int except) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(series.size()); ++i) {
    if (i == except) continue;
    auto it = series[i].time.find(size);
    if (it == series[i].time.end()) continue;
    if (best < 0 || it->second < series[best].time.at(size)) best = i;
  }
  return best;
}

struct Run {
  int winner;
  std::vector<uint64_t> sizes;  // measured sizes it won
};

std::string describe(const std::vector<Series>& series, const Run& run, uint64_t lo, uint64_t hi,
                     double tolerance) {
  const Series& w = series[run.winner];
  const uint64_t mid = run.sizes[run.sizes.size() / 2];
  const double t = w.time.at(mid);
  std::string c = "measured " + tuner::format_size(run.sizes.front());
  if (run.sizes.size() > 1) c += "-" + tuner::format_size(run.sizes.back());
  c += ": " + w.name + " " + us_str(t);
  const int other = fastest(series, mid, run.winner);
  if (other < 0) {
    c += " at " + tuner::format_size(mid) + ", the only pair measured there";
  } else {
    const double to = series[other].time.at(mid);
    c += std::string(to < t ? " vs " : " vs next best ") + series[other].name + " " + us_str(to) +
         " at " + tuner::format_size(mid);
    if (to < t) {
      char pct[32];
      std::snprintf(pct, sizeof(pct), "%g%%", tolerance * 100);
      c += std::string(" (within ") + pct + ", kept)";
    }
  }
  // What is missing behind this interval, so a reader knows how firm it is.
  std::string wrong_note, missing_note;
  for (const Series& s : series) {
    std::vector<uint64_t> wrong, missing;
    for (uint64_t b : s.wrong) {
      if (b >= lo && (hi == tuner::kNoLimit || b < hi)) wrong.push_back(b);
    }
    for (uint64_t b : run.sizes) {
      if (s.time.count(b) == 0 && s.wrong.count(b) == 0) missing.push_back(b);
    }
    if (!wrong.empty())
      wrong_note += (wrong_note.empty() ? "" : ", ") + s.name + " at " + size_list(wrong);
    if (!missing.empty())
      missing_note += (missing_note.empty() ? "" : ", ") + s.name + " at " + size_list(missing);
  }
  if (!wrong_note.empty()) c += "; #wrong > 0, not used: " + wrong_note;
  if (!missing_note.empty()) c += "; not measured: " + missing_note;
  return c;
}

}  // namespace

Status calibrate(const std::vector<NcclTestsLog>& logs, const CalibrateOptions& opt,
                 std::vector<tuner::Rule>* rules, std::string* error) {
  NF_CHECK(check_logs(logs, opt, error));
  std::vector<Series> series(logs.size());
  std::set<uint64_t> sizes;
  for (size_t i = 0; i < logs.size(); ++i) {
    NF_CHECK(make_series(logs[i], opt, &series[i], error));
    for (const auto& m : series[i].time) sizes.insert(m.first);
  }

  // Per size, the fastest pair; a pair within tolerance of it that also won the size before
  // keeps winning, so measurement noise does not split an interval.
  std::vector<Run> runs;
  for (uint64_t size : sizes) {
    const int best = fastest(series, size, -1);
    int winner = best;
    if (!runs.empty()) {
      const Series& prev = series[runs.back().winner];
      auto it = prev.time.find(size);
      if (it != prev.time.end() && it->second <= series[best].time.at(size) * (1 + opt.tolerance))
        winner = runs.back().winner;
    }
    if (runs.empty() || runs.back().winner != winner) runs.push_back(Run{winner, {}});
    runs.back().sizes.push_back(size);
  }

  const NcclTestsLog& shape = logs[0];
  std::vector<tuner::Rule> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    tuner::Rule r;
    r.coll = shape.coll;
    // Boundaries sit at the first size the next pair won: below it, only the earlier pair's
    // measurements say anything.
    r.size_lo = i == 0 ? 0 : runs[i].sizes.front();
    r.size_hi = i + 1 == runs.size() ? tuner::kNoLimit : runs[i + 1].sizes.front();
    if (opt.exact_shape) {
      r.nodes = tuner::IntRange{shape.n_nodes, shape.n_nodes};
      r.ranks = tuner::IntRange{shape.n_ranks, shape.n_ranks};
      r.rpn = tuner::IntRange{shape.ranks_per_node, shape.ranks_per_node};
    }
    const Series& w = series[runs[i].winner];
    r.algo = w.log->algo;
    r.proto = w.log->proto;
    r.channels = tuner::kAny;
    r.chunk = 0;
    r.line = 0;
    r.comment = describe(series, runs[i], r.size_lo, r.size_hi, opt.tolerance);
    out.push_back(r);
  }
  *rules = std::move(out);
  return Status::kOk;
}

}  // namespace tune
}  // namespace nf
