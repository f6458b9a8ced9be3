// Reader of `nsys export --type sqlite` files (Nsight Systems): ranks from the processes,
// NVTX push/pop and start/end ranges per thread, kernels / memcpy / memset per (device,
// stream) and CUDA runtime calls. Part of the trace loader (see trace_loading.hpp).
#include <sqlite3.h>

#include <algorithm>
#include <cstring>

#include "trace_loading.hpp"
#include "ulysses/profiler/trace_writer.hpp"

namespace ulysses::prof::detail {

void read_nsys_file(Builder& b, sql::Db& db, const std::string& path, const LoadOptions& opts) {
  TraceModel& m = b.m;
  try {
    // Strings used by this file, mapped into the model's table.
    std::unordered_map<int64_t, int32_t> sid;
    if (db.has_table("StringIds")) {
      sql::Stmt st(db, "SELECT id, value FROM StringIds");
      while (st.step()) sid[st.i64(0)] = b.intern(st.text(1));
    }
    auto str = [&](int64_t id) -> int32_t {
      auto it = sid.find(id);
      return it == sid.end() ? b.intern("?") : it->second;
    };
    std::unordered_map<int64_t, std::string> thread_names;
    if (db.has_table("ThreadNames")) {
      sql::Stmt st(db, "SELECT nameId, globalTid FROM ThreadNames");
      while (st.step()) thread_names[st.i64(1)] = m.strings[str(st.i64(0))];
    }

    // Ranks: one per process, in pid order.
    const std::string pid_sql = "/ " + std::to_string(kGlobalIdShift) + " % " + std::to_string(kGlobalIdShift);
    std::map<int64_t, int32_t> pid_rank;  // pid -> rank
    m.from_nsys = true;
    std::vector<int64_t> pids;
    if (db.has_table("PROCESSES")) {
      sql::Stmt st(db, "SELECT DISTINCT pid FROM PROCESSES WHERE pid IS NOT NULL ORDER BY pid");
      while (st.step()) pids.push_back(st.i64(0));
    }
    if (db.has_table("NVTX_EVENTS")) {
      sql::Stmt st(db, "SELECT DISTINCT globalTid " + pid_sql + " FROM NVTX_EVENTS WHERE globalTid IS NOT NULL");
      while (st.step()) pids.push_back(st.i64(0));
    }
    if (db.has_table("CUPTI_ACTIVITY_KIND_KERNEL")) {
      sql::Stmt st(db, "SELECT DISTINCT globalPid " + pid_sql + " FROM CUPTI_ACTIVITY_KIND_KERNEL");
      while (st.step()) pids.push_back(st.i64(0));
    }
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    const int32_t base = static_cast<int32_t>(m.ranks.size());
    for (size_t i = 0; i < pids.size(); ++i) {
      RankInfo ri;
      ri.rank = base + static_cast<int32_t>(i);
      ri.pid = pids[i];
      ri.device = "nsys";
      pid_rank[pids[i]] = ri.rank;
      m.ranks.push_back(ri);
    }
    if (pids.empty()) {
      RankInfo ri;
      ri.rank = base;
      m.ranks.push_back(ri);
    }
    auto rank_of_pid = [&](int64_t pid) {
      auto it = pid_rank.find(pid);
      return it == pid_rank.end() ? base : it->second;
    };

    // NVTX ranges, one source lane per thread.
    if (db.has_table("NVTX_EVENTS")) {
      sql::Stmt st(db,
          "SELECT start, end, globalTid, textId, text FROM NVTX_EVENTS "
          "WHERE eventType IN (59, 60) AND end IS NOT NULL ORDER BY rowid");
      sqlite3_stmt* s = st.get();
      std::unordered_map<int64_t, int32_t> lane_of_gtid;
      while (st.step()) {
        TraceRange r;
        r.start_ns = sqlite3_column_int64(s, 0);
        r.end_ns = sqlite3_column_int64(s, 1);
        if (r.end_ns < r.start_ns) continue;
        const int64_t gtid = sqlite3_column_int64(s, 2);
        if (sqlite3_column_type(s, 3) != SQLITE_NULL) {
          r.name_id = str(sqlite3_column_int64(s, 3));
        } else {
          const unsigned char* t = sqlite3_column_text(s, 4);
          r.name_id = b.intern(t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s, 4))
                                 : std::string());
        }
        Phase p;
        if (phase_from_name(m.strings[r.name_id], &p)) r.phase = p;
        auto it = lane_of_gtid.find(gtid);
        if (it == lane_of_gtid.end()) {
          const int64_t tid = tid_of_global_tid(gtid);
          auto tn = thread_names.find(gtid);
          std::string name = tn != thread_names.end() ? tn->second : "thread " + std::to_string(tid);
          int order = name == "main" ? 0 : 1;
          it = lane_of_gtid.emplace(gtid, b.source(rank_of_pid(pid_of_global_id(gtid)), LaneKind::HostThread, tid,
                                                   name, order)).first;
        }
        r.lane = it->second;
        r.rank = b.sources[r.lane].rank;
        m.ranges.push_back(r);
      }
    }

    // GPU activity: kernels, memcpy, memset, one lane per (device, stream).
    if (opts.gpu_activity) {
      struct GpuTable {
        const char* table;
        const char* name_sql;
      };
      const GpuTable tables[] = {
          {"CUPTI_ACTIVITY_KIND_KERNEL", "COALESCE(shortName, demangledName)"},
          {"CUPTI_ACTIVITY_KIND_MEMCPY", "NULL"},
          {"CUPTI_ACTIVITY_KIND_MEMSET", "NULL"}};
      for (const auto& t : tables) {
        if (!db.has_table(t.table)) continue;
        bool is_memcpy = std::strcmp(t.table, "CUPTI_ACTIVITY_KIND_MEMCPY") == 0;
        bool is_memset = std::strcmp(t.table, "CUPTI_ACTIVITY_KIND_MEMSET") == 0;
        int32_t fixed_name = is_memcpy ? b.intern("[CUDA memcpy]") : is_memset ? b.intern("[CUDA memset]") : -1;
        const char* corr = db.has_column(t.table, "correlationId") ? ", correlationId" : ", 0";
        sql::Stmt st(db, std::string("SELECT start, end, deviceId, streamId, globalPid, ") + t.name_sql +
                             (is_memcpy || is_memset ? ", bytes" : ", 0") + corr + " FROM " + t.table);
        sqlite3_stmt* s = st.get();
        while (st.step()) {
          TraceRange r;
          r.start_ns = sqlite3_column_int64(s, 0);
          r.end_ns = sqlite3_column_int64(s, 1);
          if (r.end_ns < r.start_ns) continue;
          int64_t dev = sqlite3_column_int64(s, 2), stream = sqlite3_column_int64(s, 3);
          r.name_id = fixed_name >= 0 ? fixed_name : str(sqlite3_column_int64(s, 5));
          r.bytes_sent = sqlite3_column_int64(s, 6);
          r.is_kernel = true;
          r.correlation = static_cast<uint32_t>(sqlite3_column_int64(s, 7));
          int32_t rank = rank_of_pid(pid_of_global_id(sqlite3_column_int64(s, 4)));
          std::string lname = (dev != 0 ? "gpu " + std::to_string(dev) + " " : std::string()) + "stream " +
                              std::to_string(stream);
          r.lane = b.source(rank, LaneKind::CudaStream, (dev << 32) | (stream & 0xFFFFFFFF), lname, 3);
          r.rank = rank;
          m.ranges.push_back(r);
        }
      }
    }

    // CUDA runtime calls (the launches of the kernels above; exports pair them by correlation).
    if (opts.gpu_activity && db.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") &&
        db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId") &&
        db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid") &&
        db.has_column("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")) {
      sql::Stmt st(db, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
      while (st.step()) {
        RuntimeCall c;
        c.start_ns = st.i64(0);
        c.end_ns = st.i64(1);
        const int64_t gtid = st.i64(2);
        c.rank = rank_of_pid(pid_of_global_id(gtid));
        c.tid = tid_of_global_tid(gtid);
        c.correlation = st.i64(3);
        c.name_id = str(st.i64(4));
        m.runtime.push_back(c);
      }
    }
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw TraceError(describe(path) + " is corrupt or unreadable: " + e.what());
  }
}

}  // namespace ulysses::prof::detail
