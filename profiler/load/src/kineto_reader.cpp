// Reader of PyTorch profiler traces (torch.profiler export_chrome_trace): Kineto's JSON
// object ({"distributedInfo": {"rank": r, ...}, "traceEvents": [...]}) and the legacy
// autograd profiler's plain event array (what a PyTorch built without Kineto, such as
// Debian's python3-torch, writes). One rank per file: the rank distributedInfo states, else
// the number after "rank" in the file name, else the file order. CPU ops (and user
// annotations) per thread, collectives (gloo:*, nccl:*, c10d::*, record_param_comms) on
// comm lanes, kernels / memcpy / memset per (device, stream), CUDA runtime calls, and one
// step per ProfilerStep#N annotation, memory samples from "[memory]" events. Times: µs in
// the file, ns in the model.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ulysses/profiler/trace_loading.hpp"

namespace ulysses::prof::detail {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Host-side collective of torch.distributed as the profiler names it.
bool is_host_collective(const std::string& n) {
  return starts_with(n, "gloo:") || starts_with(n, "nccl:") || starts_with(n, "c10d::") || starts_with(n, "mpi:") ||
         starts_with(n, "ucc:") || n == "record_param_comms";
}

int64_t num_i64(const json& j, const char* key, int64_t dflt) {
  auto it = j.find(key);
  if (it == j.end()) return dflt;
  if (it->is_number_unsigned()) return it->get<uint64_t>() <= INT64_MAX ? it->get<int64_t>() : dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number()) {  // a double outside int64 (1e300) has no int64 value
    const double d = it->get<double>();
    return std::isfinite(d) && std::fabs(d) < 9.2e18 ? static_cast<int64_t>(d) : dflt;
  }
  if (it->is_string()) {  // legacy traces write pid "CPU functions"; some tools write numbers as text
    const std::string s = it->get<std::string>();
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    return end && *end == '\0' && !s.empty() ? v : dflt;
  }
  return dflt;
}

// Why a time could not be read (TimeFault::None: it could).
enum class TimeFault { None, Text, NotANumber, OutOfRange };

// Microseconds (a JSON number) to ns in *ns. Text ("12", "-inf", "abc") is no number, whatever
// it spells: reading it as a number would give 0 or as much of it as parses. Numbers without an ns value
// within +-2^62 (1e300, 2^64 - 1) are out of range.
TimeFault us_to_ns(const json& v, int64_t* ns) {
  if (v.is_string()) return TimeFault::Text;
  if (!v.is_number()) return TimeFault::NotANumber;  // true, null, an object: no time at all
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) return TimeFault::OutOfRange;
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i > kMaxForeignTimeNs / 1000 || i < -kMaxForeignTimeNs / 1000) return TimeFault::OutOfRange;
    *ns = i * 1000;
    return TimeFault::None;
  }
  const double us = v.get<double>();
  if (!std::isfinite(us) || std::fabs(us) * 1000.0 > static_cast<double>(kMaxForeignTimeNs))
    return TimeFault::OutOfRange;
  *ns = static_cast<int64_t>(std::llround(us * 1000.0));
  return TimeFault::None;
}

// A value of a file as a note quotes it: JSON text, control characters as '?', at most 40 bytes.
std::string quote_value(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

// Events left out or changed, per reason, for one note each: how many, and the first one's
// category, name and value, so that the user can find it in the file.
struct EventTally {
  std::map<std::string, std::pair<int64_t, std::string>> by_reason;  // reason -> (events, first example)
  void add(const std::string& reason, const std::string& example) {
    auto& e = by_reason[reason];
    if (e.first++ == 0) e.second = example;
  }
};

// A string member of an event, "" when absent or not a string ({"ph": 5} threw type_error).
std::string str_of(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

bool looks_like_json(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;  // a FIFO would block the open until a writer came
  std::ifstream f(path, std::ios::binary);
  std::string head(4096, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  const size_t first = json_text_start(head);
  // Only whitespace in the first 4 KiB: read on (a file padded with blank lines).
  if (first == std::string::npos && head.size() == 4096) {
    char c = 0;
    while (f.get(c)) {
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
      return c == '{' || c == '[';
    }
    return false;
  }
  return first != std::string::npos && (head[first] == '{' || head[first] == '[');
}

namespace {

// c10::DeviceType of a "[memory]" event.
constexpr int64_t kMemCpu = 0, kMemCuda = 1;

struct MemSample {
  int64_t t_ns = 0, device_type = 0, device_id = -1, bytes = 0, allocated = -1, reserved = -1;
  int64_t peak = -1, step = -1;  // from our own export's args; -1: computed here
  std::string label;
};

// The rank's memory samples (TraceModel::memory) from its "[memory]" events: one device's
// allocator, the one the rank runs on (its GPU, else the CPU; else the other kind, said in a
// note). allocated and reserved are the allocator's totals as written; a trace whose events
// carry only Bytes (older PyTorch) gets allocated as their running sum from the trace's start,
// noted. peak: the largest allocated so far in the sample's step (since the previous step's
// end outside steps), so a step window's peak is that window's. Samples lie in the step whose
// ProfilerStep#N range holds them (-1: none).
void memory_samples_to_model(Builder& b, int32_t rank, int64_t device, std::vector<MemSample> all, int64_t bad,
                             const std::function<void(const std::string&)>& note) {
  TraceModel& m = b.m;
  if (all.empty() && bad == 0) return;
  auto count_of = [&](int64_t type, int64_t id) {
    return std::count_if(all.begin(), all.end(),
                         [&](const MemSample& x) { return x.device_type == type && (id < 0 || x.device_id == id); });
  };
  // Which allocator: the rank's GPU, else the CPU, else the CUDA device with most samples.
  int64_t type = kMemCpu, id = -1;
  if (device >= 0 && device != kUnknownDevice && count_of(kMemCuda, device) > 0) {
    type = kMemCuda;
    id = device;
  } else if (device >= 0 && device == kUnknownDevice && count_of(kMemCuda, -1) > 0) {
    type = kMemCuda;
  } else if (count_of(kMemCpu, -1) == 0) {
    std::map<int64_t, int64_t> per_id;
    for (const auto& x : all)
      if (x.device_type == kMemCuda) ++per_id[x.device_id];
    int64_t best = 0;
    for (const auto& [d, n] : per_id)
      if (n > best) {
        best = n;
        id = d;
      }
    if (best > 0) type = kMemCuda;
  }
  const std::string device_name = type == kMemCpu ? std::string("cpu") : gpu_rank_device(gpu_device_id(id));
  std::vector<MemSample> sel;
  for (const auto& x : all)
    if (x.device_type == type && (type == kMemCpu || id < 0 || x.device_id == id)) sel.push_back(x);
  const size_t others = all.size() - sel.size();
  std::stable_sort(sel.begin(), sel.end(), [](const MemSample& x, const MemSample& y) { return x.t_ns < y.t_ns; });
  // This rank's steps, by start (read from this file just now).
  std::vector<const StepInfo*> steps;
  for (const auto& st : m.steps)
    if (st.rank == rank) steps.push_back(&st);
  std::sort(steps.begin(), steps.end(), [](const StepInfo* x, const StepInfo* y) { return x->start_ns < y->start_ns; });
  const int32_t label = b.intern("[memory] " + device_name);
  int64_t sum = 0, reserved = 0, peak = 0, summed = 0, prev_step = -2;
  size_t si = 0;
  for (const auto& x : sel) {
    while (si < steps.size() && steps[si]->end_ns < x.t_ns) ++si;
    // Our own export says a sample's step (none when it has no "step"); torch.profiler's events
    // lie in the step whose range holds them.
    const int64_t step = x.peak >= 0                                          ? x.step
                         : si < steps.size() && steps[si]->start_ns <= x.t_ns ? steps[si]->step
                                                                              : -1;
    int64_t allocated = x.allocated;
    if (allocated < 0) {  // only Bytes: the running sum (what was allocated before the trace is not in it)
      sum = std::clamp<int64_t>(sum + x.bytes, 0, (int64_t{1} << 62) - 1);
      allocated = sum;
      ++summed;
    } else {
      sum = allocated;
    }
    if (x.reserved >= 0) reserved = x.reserved;
    if (step != prev_step) peak = 0;
    prev_step = step;
    peak = std::max(peak, allocated);
    MemoryPoint p;
    p.rank = rank;
    p.t_ns = x.t_ns;
    p.allocated = allocated;
    p.reserved = reserved;
    p.peak = x.peak >= 0 ? x.peak : peak;
    p.label_id = x.label.empty() ? label : b.intern(Builder::capped(x.label));
    p.step = step;
    m.memory.push_back(p);
  }
  std::string what = std::to_string(sel.size()) + " [memory] samples of " + device_name +
                     "'s allocator read as the memory view's samples";
  if (others > 0) what += "; " + std::to_string(others) + " of other devices left out";
  if (bad > 0) what += "; " + std::to_string(bad) + " without a readable time or byte count left out";
  note(what);
  if (summed > 0)
    note(std::to_string(summed) +
         " [memory] samples without \"Total Allocated\": allocated is the running sum of their Bytes from the "
         "trace's start (memory allocated before the profiler started is not in it)");
}

// The events are taken out of the document as the parser completes each one, keeping only
// what is read below in a compact record (Kineto's args of a CPU op, its input shapes and
// types, are most of a trace): a 139 MB trace takes 1.1 GB as one document.
struct KinetoEvent {
  std::string cat, name;
  json ts, dur;  // µs as written (a number, or a number as text); dur null when absent
  int64_t pid = 0, tid = 0;
  int64_t correlation = 0, external_id = 0, device = 0, stream = 0, bytes = 0;  // args
  // Ulysses attributes, as `ulysses-trace export` writes them in a range's args (-1: none).
  int64_t step = -1, layer = -1, head_begin = -1, head_end = -1, chunk = -1, bytes_sent = 0, bytes_recv = 0;
  int64_t pg = -1, seq = -1;  // collective identity
  std::string direction;
};

// A "[memory]" instant event of torch.profiler(profile_memory=True): the allocator's totals
// after one allocation or free (Bytes < 0) on one device. -1: absent or no byte count.
struct KinetoMemEvent {
  json ts;
  int64_t device_type = 0, device_id = -1, bytes = 0, allocated = -1, reserved = -1;
  int64_t peak = -1, step = -1;  // our own export's args (ulysses-trace export)
  std::string label;
};

// What read_kineto_file reads from one trace, shared by its steps: the events kept, the
// rank being built and what was left out, per kind.
struct KinetoFile {
  Builder& b;
  const std::string& path;
  const LoadOptions& opts;
  TraceModel& m;
  std::string fname;
  std::vector<KinetoEvent> kept;
  std::vector<KinetoMemEvent> mems;
  int64_t bad_mems = 0;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;  // (pid, tid) -> name
  size_t entries = 0, not_events = 0;
  int64_t no_ts = 0;  // complete events without a time
  int64_t head_copies = 0;
  int64_t base_ns = 0;
  int64_t hint = -1;
  int32_t rank = 0;
  RankInfo ri;
  ForeignRank fr;
  int64_t device = -1, bad_steps = 0, bad_attrs = 0, repeated_steps = 0;
  EventTally dropped;  // events left out, per reason ("dur is text", "ts is out of range", "dur is negative")
  std::set<int64_t> seen_steps;
  size_t first_range = 0;

  KinetoFile(Builder& b_, const std::string& path_, const LoadOptions& opts_)
      : b(b_),
        path(path_),
        opts(opts_),
        m(b_.m),
        fname(path_.substr(path_.find_last_of('/') == std::string::npos ? 0 : path_.find_last_of('/') + 1)) {}
  void note(const std::string& s) { m.notes.push_back(fname + ": " + s); }
};

// A "[memory]" event: kept as a sample, or counted unreadable.
void reduce_memory_event(KinetoFile& f, json& e, const json& args) {
  // A byte count: a whole number within 2^62 (NaN, 1e300 and text are none).
  auto count = [&](const char* key) {
    const int64_t v = num_i64(args, key, -1);
    return v >= 0 && v < (int64_t{1} << 62) ? v : -1;
  };
  KinetoMemEvent me;
  if (!e.contains("ts")) {
    ++f.bad_mems;
    return;
  }
  me.ts = std::move(e["ts"]);
  me.device_type = num_i64(args, "Device Type", 0);
  me.device_id = num_i64(args, "Device Id", -1);
  me.bytes = num_i64(args, "Bytes", 0);
  if (me.bytes <= -(int64_t{1} << 62) || me.bytes >= (int64_t{1} << 62)) me.bytes = 0;
  me.allocated = count("Total Allocated");
  me.reserved = count("Total Reserved");
  me.peak = count("peak");
  me.step = num_i64(args, "step", -1);
  if (me.step > INT32_MAX) me.step = -1;
  me.label = str_of(args, "label");
  // Present but unreadable totals make the sample unreadable (absent ones are summed).
  if ((args.contains("Total Allocated") && me.allocated < 0) || (args.contains("Total Reserved") && me.reserved < 0)) {
    ++f.bad_mems;
    return;
  }
  f.mems.push_back(std::move(me));
}

// One event, complete: thread names, memory samples and complete ("X") events are kept in
// their compact records, the rest dropped.
void reduce_event(KinetoFile& f, json& e) {
  static const json no_args = json::object();
  const std::string ph = str_of(e, "ph");
  auto a = e.find("args");
  const json& args = a != e.end() && a->is_object() ? *a : no_args;
  if (ph == "M" && str_of(e, "name") == "thread_name") {
    if (args.contains("name") && args["name"].is_string())
      f.thread_names[{num_i64(e, "pid", 0), num_i64(e, "tid", 0)}] = args["name"].get<std::string>();
    return;
  }
  if ((ph == "i" || ph == "I" || ph == "C") && str_of(e, "name") == "[memory]") return reduce_memory_event(f, e, args);
  if (ph != "X") return;
  KinetoEvent k;
  k.cat = str_of(e, "cat");
  if (k.cat == "Trace" || k.cat == "gpu_user_annotation" || k.cat == "ac2g" || k.cat == "python_function") return;
  if (!e.contains("ts")) {
    ++f.no_ts;
    return;
  }
  // Our own export's display copies of ranges that carry heads ("heads a-b" lanes): the
  // ranges themselves are in the file too (read back, attention counted twice).
  if (k.cat == "ulysses_heads") {
    ++f.head_copies;
    return;
  }
  k.name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "?";
  k.ts = std::move(e["ts"]);
  if (auto d = e.find("dur"); d != e.end()) k.dur = std::move(*d);
  k.pid = num_i64(e, "pid", 0);
  k.tid = num_i64(e, "tid", 0);
  k.correlation = num_i64(args, "correlation", 0);
  k.external_id = num_i64(args, "External id", 0);
  k.device = num_i64(args, "device", k.pid);
  k.stream = num_i64(args, "stream", k.tid);
  k.bytes = num_i64(args, "bytes", 0);
  if (k.cat == "user_annotation") {
    k.step = num_i64(args, "step", -1);
    k.layer = num_i64(args, "layer", -1);
    k.head_begin = num_i64(args, "head_begin", -1);
    k.head_end = num_i64(args, "head_end", -1);
    k.chunk = num_i64(args, "chunk", -1);
    k.bytes_sent = num_i64(args, "bytes_sent", 0);
    k.bytes_recv = num_i64(args, "bytes_recv", 0);
    k.pg = num_i64(args, "pg", -1);
    k.seq = num_i64(args, "seq", -1);
    k.direction = str_of(args, "direction");
  }
  f.kept.push_back(std::move(k));
}

// The document, its events reduced as the parser completes each one (the document keeps
// the rest: distributedInfo, baseTimeNanoseconds).
constexpr int kMaxKinetoDepth = 64;

json parse_events(KinetoFile& f) {
  const std::string& path = f.path;
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError("cannot read " + describe(path));
  int events_depth = -1;  // depth of the events array's elements: 2 in {"traceEvents": [...]}, 1 in [...]
  bool events_key = false, in_events = false;  // in_events: inside that array (not another top-level one)
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    using E = json::parse_event_t;
    // A profiler trace nests a few levels (document, events, args, a list in args): refuse a
    // deeper one at once instead of reading megabytes of '[' to the end of the file.
    if (depth >= kMaxKinetoDepth && (ev == E::array_start || ev == E::object_start))
      throw TraceError(describe(path) + " nests deeper than " + std::to_string(kMaxKinetoDepth) +
                       " levels: not a PyTorch profiler trace");
    if (depth == 0 && ev == E::array_start) {  // the legacy plain array
      events_depth = 1;
      in_events = true;
    }
    if (depth == 1 && ev == E::key)
      events_key = parsed.is_string() && parsed.get_ref<const std::string&>() == "traceEvents";
    if (depth == 1 && ev == E::array_start && events_key && events_depth < 0) {
      events_depth = 2;
      in_events = true;
    } else if (depth == 1 && (ev == E::array_start || ev == E::array_end) && events_depth == 2) {
      in_events = false;  // past traceEvents, or in another top-level array ("deviceProperties")
    }
    if (!in_events || depth != events_depth) return true;
    if (ev == E::object_end) {  // one event, complete: keep what is read, drop the rest
      ++f.entries;
      reduce_event(f, parsed);
      return false;
    }
    if (ev == E::value || ev == E::array_end) {  // an entry that is no event object
      ++f.entries;
      ++f.not_events;
      return false;
    }
    return true;
  };
  try {
    return json::parse(in, cb, true);
  } catch (const json::parse_error& e) {
    // Where it stops being JSON (not the parser's text, which quotes the file's bytes).
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    // The parser counts end of file as one byte past the last.
    const auto at = ec ? e.byte : std::min<std::uintmax_t>(e.byte, size);
    throw TraceError(describe(path) + " is not valid JSON: it stops being JSON at byte " + std::to_string(at) +
                     (ec ? std::string() : " of " + std::to_string(size)) +
                     " (truncated, or not a PyTorch profiler trace?)");
  }
}

// The document around the events: legacy array or Kineto object (its distributedInfo rank and
// baseTimeNanoseconds), else no profiler trace.
void read_document_header(KinetoFile& f, json& doc) {
  const std::string& path = f.path;
  if (doc.is_discarded())
    throw TraceError(describe(path) + " is not valid JSON (truncated or not a PyTorch profiler trace?)");
  if (doc.is_array()) {
    f.note(
        "legacy autograd-profiler trace (no Kineto): no distributedInfo; timestamps start at each rank's "
        "profiler start, so ranks are not aligned in time");
  } else if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()) {
    if (doc.contains("distributedInfo") && doc["distributedInfo"].is_object())
      f.hint = num_i64(doc["distributedInfo"], "rank", -1);
    else
      f.note("no distributedInfo (not a distributed run, or an old PyTorch): rank taken from the file name or order");
    if (doc.contains("baseTimeNanoseconds") && doc["baseTimeNanoseconds"].is_number_integer()) {
      f.base_ns = num_i64(doc, "baseTimeNanoseconds", 0);
      if (time_out_of_range(f.base_ns)) {  // INT64_MAX wrapped every time past it
        f.note("baseTimeNanoseconds " + doc["baseTimeNanoseconds"].dump() + " is beyond +-2^62 ns: taken as 0");
        f.base_ns = 0;
      }
    }
  } else {
    // traceEvents present but not a list (an object, a number) says so, not "no traceEvents".
    const auto te = doc.is_object() ? doc.find("traceEvents") : doc.end();
    throw TraceError(describe(path) + " is JSON but not a PyTorch profiler trace (" +
                     (doc.is_object() && te != doc.end()
                          ? "traceEvents is " + std::string(te->type_name()) + ", not a list of events"
                          : std::string("no traceEvents")) +
                     ")");
  }
}

// An event's start and duration in ns; false (the reason tallied with the event as example)
// when ts or dur is text, no number, beyond +-2^62 ns, or the duration negative.
bool event_times(KinetoFile& f, const KinetoEvent& e, int64_t* start_out, int64_t* dur_out) {
  const std::string& cat = e.cat;
  const std::string& name = e.name;
  int64_t start = 0, dur = 0, ts = 0;
  auto example = [&](const char* field, const json& v) {
    std::string n = Builder::capped(name).substr(0, 40);
    for (char& c : n)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return (cat.empty() ? std::string("event") : quote_value(json(cat))) + " '" + n + "' " + field + " " +
           quote_value(v);
  };
  const TimeFault dur_fault = e.dur.is_null() ? TimeFault::None : us_to_ns(e.dur, &dur);
  const TimeFault ts_fault = us_to_ns(e.ts, &ts);
  const TimeFault fault = ts_fault != TimeFault::None ? ts_fault : dur_fault;
  const char* field = ts_fault != TimeFault::None ? "ts" : "dur";
  const json& value = ts_fault != TimeFault::None ? e.ts : e.dur;
  int64_t end = 0;
  if (fault == TimeFault::Text) {
    f.dropped.add(std::string(field) + " is text", example(field, value));
    return false;
  }
  if (fault == TimeFault::NotANumber) {
    f.dropped.add(std::string(field) + " is no number (true, null, an object)", example(field, value));
    return false;
  }
  if (fault == TimeFault::OutOfRange || __builtin_add_overflow(f.base_ns, ts, &start) ||
      __builtin_add_overflow(start, dur, &end) || time_out_of_range(start) || time_out_of_range(end)) {
    f.dropped.add(std::string(fault == TimeFault::OutOfRange ? field : "ts") + " is beyond +-2^62 ns (146 years)",
                  fault == TimeFault::OutOfRange ? example(field, value) : example("ts", e.ts));
    return false;
  }
  if (dur < 0) {
    f.dropped.add("dur is negative (an end before its start)", example("dur", e.dur));
    return false;
  }
  *start_out = start;
  *dur_out = dur;
  return true;
}

// A kernel, memcpy or memset: a range on its (device, stream) lane.
void add_gpu_range(KinetoFile& f, const KinetoEvent& e, TraceRange& r) {
  int64_t dev = e.device;
  const int64_t stream = e.stream;
  dev = gpu_device_id(dev);  // -1 or 2^40: "device id unknown"
  if (f.device < 0) f.device = dev;
  r.is_kernel = true;
  RangeExtra x;
  x.correlation = static_cast<uint32_t>(e.correlation);
  x.external_id = e.external_id;
  if (e.cat != "kernel") x.bytes_sent = e.bytes;
  if (!x.empty()) f.m.extra_for(r) = x;
  r.lane = f.b.source(f.rank, LaneKind::CudaStream, stream_lane_key(dev, stream),
                      gpu_lane_label(dev) + " stream " + std::to_string(stream), 3);
  f.m.ranges.rows().push_back(r);
}

// A range of our own export (a phase's name, its attributes in args): read back as traced,
// so the all-to-alls count as communication again (they were all compute) and per-step,
// per-layer and per-head tables keep them.
void set_annotation_attributes(KinetoFile& f, const KinetoEvent& e, TraceRange& r) {
  Phase p;
  if (phase_from_name(e.name, &p) && p != Phase::Step) r.phase = p;
  if (e.step >= 0 && e.step <= INT32_MAX) r.step = static_cast<int32_t>(e.step);
  f.bad_attrs += set_layer_heads_chunk(r, e.layer, e.head_begin, e.head_end, e.chunk);
  for (const Direction d : {Direction::Forward, Direction::Backward, Direction::Recompute})
    if (e.direction == direction_name(d)) r.dir = d;
  RangeExtra x;
  x.bytes_sent = std::max<int64_t>(0, e.bytes_sent);
  x.bytes_recv = std::max<int64_t>(0, e.bytes_recv);
  if (e.pg >= 0 && e.pg <= INT32_MAX && e.seq >= 0 && e.seq <= INT32_MAX) {  // the waiting analysis pairs them
    x.pg = static_cast<int32_t>(e.pg);
    x.seq = static_cast<int32_t>(e.seq);
  }
  if (!x.empty()) f.m.extra_for(r) = x;
}

// A ProfilerStep#N range: one step record of the rank, unless its number is none or repeated.
void record_step(KinetoFile& f, const std::string& name, int64_t dur, TraceRange& r) {
  // A step number must be 0..2^31-1 digits: "ProfilerStep#-3" would be a step -3 (and a summary
  // saying "no traced step in --step-begin 0"), a huge one would be cut to int32.
  const std::string step_digits = starts_with(name, "ProfilerStep#") ? name.substr(13) : std::string();
  const bool step_ok = !step_digits.empty() && step_digits.size() <= 9 &&
                       step_digits.find_first_not_of("0123456789") == std::string::npos;
  if (!step_digits.empty() && !step_ok) ++f.bad_steps;
  // A step this rank already has (two ProfilerStep#1 events) is one step record, as in our own
  // format (a second one would make every table count step 1 twice); the repeat stays a plain range.
  if (step_ok && !f.seen_steps.insert(std::stoll(step_digits)).second) {
    ++f.repeated_steps;
  } else if (step_ok) {
    StepInfo si;
    si.rank = f.rank;
    si.step = std::stoll(step_digits);
    si.start_ns = r.start_ns;
    si.end_ns = r.end_ns;
    si.step_ms = double(dur) / 1e6;
    f.m.steps.push_back(si);
    r.phase = Phase::Step;
    r.step = static_cast<int32_t>(si.step);
  }
}

// A CPU op or annotation: a range on its thread's lane (collectives on a comm lane).
void add_host_range(KinetoFile& f, const KinetoEvent& e, int64_t dur, TraceRange& r) {
  const int64_t pid = e.pid, tid = e.tid;
  if (f.ri.pid == 0 && pid > 0) f.ri.pid = pid;
  const bool comm = is_host_collective(e.name);
  auto tn = f.thread_names.find({pid, tid});
  std::string lname = tn != f.thread_names.end() ? tn->second : "thread " + std::to_string(tid);
  if (comm) lname = "comm (" + lname + ")";
  r.lane = f.b.source(f.rank, comm ? LaneKind::Comm : LaneKind::HostThread, tid, lname, comm ? 2 : 0);
  if (e.cat == "user_annotation") set_annotation_attributes(f, e, r);
  record_step(f, e.name, dur, r);
  f.m.ranges.rows().push_back(r);
}

// The kept events to the model: runtime calls, GPU ranges and host ranges of the rank.
void events_to_model(KinetoFile& f) {
  for (const KinetoEvent& e : f.kept) {
    const std::string& cat = e.cat;
    int64_t start = 0, dur = 0;
    if (!event_times(f, e, &start, &dur)) continue;
    if (cat == "cuda_runtime" || cat == "cuda_driver") {
      if (!f.opts.gpu_activity) continue;
      RuntimeCall c;
      c.rank = f.rank;
      c.tid = e.tid;
      c.start_ns = start;
      c.end_ns = start + dur;
      c.correlation = e.correlation;
      c.external_id = e.external_id;
      c.name_id = f.b.intern(e.name);
      f.m.runtime.push_back(c);
      continue;
    }
    TraceRange r;
    r.start_ns = start;
    r.end_ns = start + dur;
    r.rank = f.rank;
    r.name_id = f.b.intern(e.name);
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      if (f.opts.gpu_activity) add_gpu_range(f, e, r);
      continue;
    }
    add_host_range(f, e, dur, r);
  }
}

// One note per reason: how many events were left out, and the first one's category, name
// and value, so that the user can find it in the file.
void note_dropped_events(KinetoFile& f) {
  for (const auto& [reason, c] : f.dropped.by_reason)
    f.note("traceEvents: " + std::to_string(c.first) + " rows dropped: " + reason + " (first: " + c.second + ")");
  if (f.no_ts > 0)
    f.note("traceEvents: " + std::to_string(f.no_ts) + " rows dropped: ts is missing (complete \"ph\": \"X\" events)");
  if (f.head_copies > 0)
    f.note(std::to_string(f.head_copies) +
           " display copies of ranges (cat \"ulysses_heads\", written by ulysses-trace export) left out: their "
           "ranges are read once");
  if (f.bad_attrs > 0) f.note(std::to_string(f.bad_attrs) + " layer, head or chunk args no model has shown as absent");
  if (f.repeated_steps > 0)
    f.note(std::to_string(f.repeated_steps) +
           " ProfilerStep# ranges repeating a step of this rank: kept as plain ranges (the first one is the step)");
  if (f.bad_steps > 0)
    f.note(std::to_string(f.bad_steps) +
           " ProfilerStep# ranges without a step number of 0 to 999999999: kept as plain "
           "ranges, not steps");
  // Entries that are not events at all ([[]], numbers, strings) are named, not dropped silently.
  if (f.not_events > 0)
    f.note(std::to_string(f.not_events) + " of " + std::to_string(f.entries) +
           " entries are not event objects and were left out");
  if (f.m.ranges.rows().size() == f.first_range)
    f.note("no complete (\"ph\": \"X\") events: nothing to draw for this rank");
}

// The profiler rounds times to whole µs, so a child can end up to 1 µs after its parent:
// clamp such ends so the ops nest as they ran (else they would be split over lanes).
void clamp_nested_ends(KinetoFile& f) {
  TraceModel& m = f.m;
  int64_t clamped = 0;
  std::map<int32_t, std::vector<size_t>> by_lane;
  for (size_t i = f.first_range; i < m.ranges.rows().size(); ++i)
    if (!m.ranges.rows()[i].is_kernel) by_lane[m.ranges.rows()[i].lane].push_back(i);
  for (auto& [lane, idx] : by_lane) {
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      const TraceRange &a = m.ranges.rows()[x], &c = m.ranges.rows()[y];
      return a.start_ns != c.start_ns ? a.start_ns < c.start_ns : a.end_ns > c.end_ns;
    });
    std::vector<int64_t> ends;
    for (size_t i : idx) {
      TraceRange& r = m.ranges.rows()[i];
      while (!ends.empty() && ends.back() <= r.start_ns) ends.pop_back();
      if (!ends.empty() && r.end_ns > ends.back() && r.end_ns - ends.back() <= 1000) {
        r.end_ns = ends.back();
        ++clamped;
      }
      ends.push_back(r.end_ns);
    }
  }
  if (clamped > 0)
    f.note("traceEvents: " + std::to_string(clamped) +
           " rows clamped: end up to 1 us after the event that holds them, set to that event's end (the profiler "
           "rounds times to whole us)");
}

// The "[memory]" events to the rank's memory samples (times in ns; unreadable ones counted).
void memory_events_to_model(KinetoFile& f) {
  std::vector<MemSample> samples;
  samples.reserve(f.mems.size());
  for (const KinetoMemEvent& me : f.mems) {
    MemSample x;
    int64_t ts = 0;
    if (us_to_ns(me.ts, &ts) != TimeFault::None || __builtin_add_overflow(f.base_ns, ts, &x.t_ns) ||
        time_out_of_range(x.t_ns)) {
      ++f.bad_mems;
      continue;
    }
    x.device_type = me.device_type;
    x.device_id = me.device_id;
    x.bytes = me.bytes;
    x.allocated = me.allocated;
    x.reserved = me.reserved;
    x.peak = me.peak;
    x.step = me.step;
    x.label = me.label;
    samples.push_back(x);
  }
  memory_samples_to_model(f.b, f.rank, f.device, std::move(samples), f.bad_mems,
                          [&](const std::string& s) { f.note(s); });
}

}  // namespace

void read_kineto_file(Builder& b, const std::string& path, int32_t file_index, const LoadOptions& opts) {
  b.m.format = "kineto";
  KinetoFile f(b, path, opts);
  {
    json doc = parse_events(f);
    read_document_header(f, doc);
  }
  TraceModel& m = f.m;
  f.rank = static_cast<int32_t>(m.ranks.size());
  f.ri.rank = f.rank;
  f.ri.device = "cpu";
  f.fr.provisional = f.rank;
  f.fr.file_index = file_index;
  f.fr.hint = f.hint;
  f.fr.name_hint = rank_from_file_name(f.fname);
  f.first_range = m.ranges.rows().size();
  events_to_model(f);
  note_dropped_events(f);
  clamp_nested_ends(f);
  memory_events_to_model(f);
  if (f.device >= 0) f.ri.device = gpu_rank_device(f.device);
  f.fr.pid = f.ri.pid;
  f.fr.device = f.device;
  m.ranks.push_back(f.ri);
  b.foreign.push_back(f.fr);
}

}  // namespace ulysses::prof::detail
