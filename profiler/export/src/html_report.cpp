// Self-contained HTML report of a Summary (see html_report.hpp). Charts are inline SVG
// written here; colours follow the studio's phase palette (compute blue, communication
// orange, overlap green, idle grey).
#include "ulysses/profiler/html_report.hpp"
#include "ulysses/profiler/strfmt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "ulysses/profiler/report.hpp"
#include "ulysses/profiler/phase.hpp"

namespace ulysses::prof {

namespace {

// HTML text: markup characters escaped, bytes that are no UTF-8 (names from hand-edited or
// foreign traces) replaced by U+FFFD: the page declares charset=utf-8.
std::string esc(const std::string& s) {
  std::string o;
  for (const char c : with_valid_utf8(s)) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

double html_ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
std::string html_mib(int64_t b) { return strfmt("%.1f MiB", static_cast<double>(b) / 1048576.0); }

// A figure: human text plus the exact value (shortest round-trip form) for checks.
std::string figure(const std::string& key, double exact, const std::string& text) {
  return "<td class=\"v\" data-key=\"" + esc(key) + "\" data-value=\"" + strfmt("%.17g", exact) + "\">" + esc(text) +
         "</td>";
}
std::string figure_i(const std::string& key, int64_t exact, const std::string& text) {
  return "<td class=\"v\" data-key=\"" + esc(key) + "\" data-value=\"" + strfmt("%lld", static_cast<long long>(exact)) +
         "\">" + esc(text) + "</td>";
}

const char* kColorCompute = "#3b7dd8";
const char* kColorComm = "#e8892b";
const char* kColorOverlap = "#3aa35b";
const char* kColorIdle = "#b8b8b8";
const char* kSeries[] = {"#3b7dd8", "#e8892b", "#3aa35b", "#c0392b", "#8e44ad", "#16a085", "#7f8c8d", "#d35400"};

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> pts;
};

// A line chart (x, y in data units), axes with min/max labels, legend below.
std::string line_chart(const std::string& id, const std::vector<Series>& series, const std::string& xlabel,
                       const std::string& ylabel) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = 0, y1 = -INFINITY;
  for (const auto& s : series)
    for (const auto& [x, y] : s.pts) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!std::isfinite(x0) || !std::isfinite(y1)) return "<p class=\"note\">no data</p>";
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const double W = 640, H = 220, L = 70, R = 12, T = 10, B = 34;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); };
  std::string o = strfmt(
      "<svg id=\"%s\" class=\"chart\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" role=\"img\">",
      esc(id).c_str(), W, H + 18.0 * static_cast<double>((series.size() + 3) / 4), W,
      H + 18.0 * static_cast<double>((series.size() + 3) / 4));
  o += strfmt("<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\" stroke=\"#999\"/>", L, T,
              W - L - R, H - T - B);
  o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\" text-anchor=\"end\">%.4g</text>", L - 4, T + 10, y1);
  o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\" text-anchor=\"end\">%.4g</text>", L - 4, H - B, y0);
  o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\">%.4g</text>", L, H - B + 14, x0);
  o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\" text-anchor=\"end\">%.4g</text>", W - R, H - B + 14, x1);
  o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\" text-anchor=\"middle\">%s</text>", (L + W - R) / 2, H - 6,
              esc(xlabel).c_str());
  o += strfmt(
      "<text x=\"12\" y=\"%.0f\" class=\"ax\" transform=\"rotate(-90 12 %.0f)\" text-anchor=\"middle\">%s</text>",
      (T + H - B) / 2, (T + H - B) / 2, esc(ylabel).c_str());
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    std::string pts;
    for (const auto& [x, y] : s.pts) pts += strfmt("%.1f,%.1f ", px(x), py(y));
    if (s.pts.size() == 1)
      o += strfmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", px(s.pts[0].first), py(s.pts[0].second),
                  s.color.c_str());
    else
      o += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + s.color + "\" points=\"" + pts + "\"/>";
    const double lx = L + static_cast<double>(i % 4) * 140, ly = H + 12 + 18.0 * static_cast<double>(i / 4);
    o += strfmt(
        "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
        "class=\"ax\">%s</text>",
        lx, ly - 10, s.color.c_str(), lx + 16, ly, esc(s.name).c_str());
  }
  return o + "</svg>";
}

// Horizontal stacked bars: per rank, compute only / overlapped / exposed comm / idle (ms per step).
std::string breakdown_chart(const std::vector<RankTotals>& ranks) {
  if (ranks.empty()) return "<p class=\"note\">no step records</p>";
  double maxw = 0;
  for (const auto& t : ranks) maxw = std::max(maxw, t.steps ? html_ms(t.wall_ns) / static_cast<double>(t.steps) : 0.0);
  if (maxw <= 0) maxw = 1;
  const double W = 640, L = 70, R = 12, row = 26;
  const double H = row * static_cast<double>(ranks.size()) + 30;
  std::string o = strfmt(
      "<svg id=\"breakdown-chart\" class=\"chart\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" role=\"img\">",
      W, H, W, H);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& t = ranks[i];
    const double n = t.steps ? static_cast<double>(t.steps) : 1.0;
    const double parts[4] = {html_ms(t.compute_ns - t.overlap_ns) / n, html_ms(t.overlap_ns) / n,
                             html_ms(t.comm_ns - t.overlap_ns) / n, html_ms(t.idle_ns) / n};
    const char* colors[4] = {kColorCompute, kColorOverlap, kColorComm, kColorIdle};
    const double y = 4 + row * static_cast<double>(i);
    o += strfmt("<text x=\"%.0f\" y=\"%.0f\" class=\"ax\" text-anchor=\"end\">rank %d</text>", L - 6, y + 15, t.rank);
    double x = L;
    for (int k = 0; k < 4; ++k) {
      const double w = std::max(0.0, parts[k]) / maxw * (W - L - R);
      o += strfmt("<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"20\" fill=\"%s\"/>", x, y, w, colors[k]);
      x += w;
    }
  }
  const char* names[4] = {"compute only", "overlapped", "exposed comm", "idle"};
  const char* colors[4] = {kColorCompute, kColorOverlap, kColorComm, kColorIdle};
  for (int k = 0; k < 4; ++k)
    o += strfmt(
        "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
        "class=\"ax\">%s</text>",
        L + k * 150.0, H - 18, colors[k], L + k * 150.0 + 16, H - 8, names[k]);
  return o + "</svg>";
}

// The page's head (title, style) and its title line: source, ranks, shape, counts.
std::string html_head(const TraceModel& m, const Summary& s, const std::string& title) {
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src "
       "data:\">\n"
       "<title>" +
       esc(title) +
       "</title>\n<style>\n"
       "body{font-family:sans-serif;max-width:980px;margin:24px auto;padding:0 16px;color:#222}\n"
       "h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}\n"
       "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
       "th{background:#f2f2f2}td.l,th.l{text-align:left}.note{color:#666}.ax{font-size:11px;fill:#333}\n"
       ".chart{display:block;margin:8px 0}\n"
       "</style></head><body>\n";
  o += "<h1>" + esc(title) + "</h1>\n";
  o += "<p class=\"note\">" + esc(m.source) +
       strfmt(" &middot; %d rank(s), sp %d &times; dp %d", s.world_size, m.sp_size, m.dp_size) +
       (m.from_nsys ? " &middot; Nsight Systems export" : "") +
       strfmt(" &middot; %lld ranges, %lld kernels", static_cast<long long>(s.num_ranges),
              static_cast<long long>(s.num_kernels)) +
       "</p>\n";
  return o;
}

// Headline: steps, median step time and tokens/s, bytes sent, peak memory, overlap.
std::string html_headline(const Summary& s) {
  std::string o;
  const Headline& h = s.headline;
  o += "<h2>Headline</h2>\n<table id=\"headline\">\n";
  o += "<tr><th class=\"l\">steps</th>" + figure_i("headline.steps", h.steps, std::to_string(h.steps)) + "</tr>\n";
  o += "<tr><th class=\"l\">median step time (step 0 left out as warm-up)</th>" +
       figure("headline.step_ms", h.step_ms, strfmt("%.2f ms", h.step_ms)) + "</tr>\n";
  o += "<tr><th class=\"l\">median tokens/s</th>" +
       figure("headline.tokens_per_s", h.tokens_per_s, strfmt("%.0f", h.tokens_per_s)) + "</tr>\n";
  o += "<tr><th class=\"l\">all-to-all sent per rank per step</th>" +
       figure_i("headline.a2a_bytes_per_step", h.a2a_bytes_per_step, html_mib(h.a2a_bytes_per_step)) + "</tr>\n";
  o += "<tr><th class=\"l\">gradient all-reduce sent per rank per step</th>" +
       figure_i("headline.allreduce_bytes_per_step", h.allreduce_bytes_per_step, html_mib(h.allreduce_bytes_per_step)) +
       "</tr>\n";
  o += "<tr><th class=\"l\">peak memory (any rank)</th>" +
       figure_i("headline.peak_memory_bytes", h.peak_memory_bytes, html_mib(h.peak_memory_bytes)) + "</tr>\n";
  o += "<tr><th class=\"l\">overlap (comm hidden behind compute)</th>" +
       figure("overall.overlap_ratio", s.overall.ratio, strfmt("%.1f %%", 100.0 * s.overall.ratio)) + "</tr>\n";
  o += "</table>\n";
  return o;
}

// Step time and loss of the lowest rank (the run's own figures), one series per rank for time.
std::string html_steps(const TraceModel& m) {
  std::map<int32_t, Series> per_rank;
  Series loss{"loss", kSeries[3], {}};
  int32_t first = INT32_MAX;
  for (const auto& st : m.steps) first = std::min(first, st.rank);
  for (const auto& st : m.steps) {
    auto& ser = per_rank[st.rank];
    ser.name = strfmt("rank %d", st.rank);
    ser.pts.emplace_back(static_cast<double>(st.step), html_ms(st.end_ns - st.start_ns));
    if (st.rank == first) loss.pts.emplace_back(static_cast<double>(st.step), st.loss);
  }
  if (per_rank.empty()) return {};
  std::vector<Series> v;
  for (auto& [r, ser] : per_rank) {
    ser.color = kSeries[static_cast<size_t>(r) % 8];
    v.push_back(ser);
  }
  std::string o = "<h2>Steps</h2>\n" + line_chart("step-chart", v, "step", "step wall time (ms)") + "\n";
  o += line_chart("loss-chart", {loss}, "step", "loss") + "\n";
  return o;
}

// Time breakdown per rank (ms per step): chart, table and the overall overlap.
std::string html_rank_breakdown(const Summary& s) {
  std::string o;
  o += "<h2>Time breakdown per rank (ms per step)</h2>\n" + breakdown_chart(s.ranks) + "\n";
  o += "<table id=\"ranks\"><tr><th>rank</th><th>steps</th><th>wall</th><th>compute</th><th>comm</th><th>overlap</th>"
       "<th>idle</th><th>overlap ratio</th></tr>\n";
  for (const auto& t : s.ranks) {
    const double n = t.steps ? static_cast<double>(t.steps) : 1.0;
    o += strfmt("<tr><td>%d</td><td>%lld</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>", t.rank,
                static_cast<long long>(t.steps), html_ms(t.wall_ns) / n, html_ms(t.compute_ns) / n,
                html_ms(t.comm_ns) / n, html_ms(t.overlap_ns) / n, html_ms(t.idle_ns) / n) +
         figure("ranks." + std::to_string(t.rank) + ".overlap_ratio", t.overlap_ratio,
                strfmt("%.1f %%", 100.0 * t.overlap_ratio)) +
         "</tr>\n";
  }
  o += "</table>\n";
  o += strfmt(
      "<p>Overlap, as Holistic Trace Analysis defines it: time when communication and computation run at once / "
      "communication time = %.3f ms / %.3f ms over all ranks and steps.</p>\n",
      html_ms(s.overall.overlap_ns), html_ms(s.overall.comm_ns));
  return o;
}

// Per layer (ms per rank per step), when the trace has layers.
std::string html_layers(const Summary& s) {
  std::string o;
  if (!s.layers.empty()) {
    o += "<h2>Per layer (ms per rank per step)</h2>\n<table id=\"layers\"><tr><th>layer</th><th "
         "class=\"l\">direction</th>"
         "<th>qkv proj</th><th>a2a seq&rarr;head</th><th>attention</th><th>a2a head&rarr;seq</th><th>out proj</th>"
         "<th>a2a sent (MiB)</th></tr>\n";
    for (const auto& l : s.layers) {
      const double n = l.samples ? static_cast<double>(l.samples) : 1.0;
      o += strfmt(
          "<tr><td>%d</td><td "
          "class=\"l\">%s</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td></tr>\n",
          l.layer, direction_name(l.dir), html_ms(l.qkv_proj_ns) / n, html_ms(l.a2a_seq_to_head_ns) / n,
          html_ms(l.attention_ns) / n, html_ms(l.a2a_head_to_seq_ns) / n, html_ms(l.out_proj_ns) / n,
          static_cast<double>(l.a2a_bytes_sent) / 1048576.0 / n);
    }
    o += "</table>\n";
  }
  return o;
}

// Who waits for whom (the text summary's Stragglers table): the last arriver makes the others
// wait. The phase-duration table below was headed "Stragglers", though the slowest rank in a
// collective is usually the one that waited, not the one that arrived last.
std::string html_waiting(const Summary& s) {
  std::string o;
  if (!s.waiting.instances.empty()) {
    const WaitingAnalysis& w = s.waiting;
    o += strfmt(
        "<h2>Stragglers: who waits for whom</h2>\n<p>%lld collectives paired across ranks by (process group, "
        "sequence number); median arrival skew %.3f ms%s.</p>\n",
        static_cast<long long>(w.instances.size()), w.median_skew_ns / 1e6,
        s.clock_error_ns >= 0
            ? strfmt("; ranks on rank 0's clock within &plusmn;%.3f ms", s.clock_error_ns / 1e6).c_str()
            : "");
    o += "<table id=\"waiting\"><tr><th>rank</th><th>collectives</th><th>last arrivals</th><th>wait caused ms</th>"
         "<th>wait suffered ms</th></tr>\n";
    for (const auto& r : w.ranks)
      o += strfmt("<tr><td>%d</td><td>%lld</td><td>%lld</td><td>%.3f</td><td>%.3f</td></tr>\n", r.rank,
                  static_cast<long long>(r.collectives), static_cast<long long>(r.last_arrivals),
                  r.wait_caused_ns / 1e6, r.wait_suffered_ns / 1e6);
    o += "</table>\n";
  }
  return o;
}

// Rank skew: slowest and fastest rank per phase, for more than one rank.
std::string html_skew(const Summary& s) {
  std::string o;
  if (s.world_size > 1 && !s.skew.empty()) {
    o += "<h2>Rank skew: slowest and fastest rank per phase (ms per step)</h2>\n<p class=\"note\">Durations, not "
         "arrivals: in a collective the slowest rank is usually the one that waited longest.</p>\n<table "
         "id=\"stragglers\"><tr>"
         "<th class=\"l\">phase</th><th>slowest rank</th><th>ms</th><th>fastest rank</th><th>ms</th><th>slowest / "
         "fastest</th></tr>\n";
    for (const auto& k : s.skew)
      o += strfmt("<tr><td class=\"l\">%s</td><td>%d</td><td>%.3f</td><td>%d</td><td>%.3f</td><td>%.3f</td></tr>\n",
                  phase_name(k.phase), k.slowest_rank, k.slowest_ns / 1e6, k.fastest_rank, k.fastest_ns / 1e6, k.ratio);
    o += "</table>\n";
  }
  return o;
}

// Memory: peak per rank over time, and the table of samples.
std::string html_memory(const TraceModel& m, const Summary& s) {
  std::string o;
  if (!m.memory.empty()) {
    o += "<h2>Memory</h2>\n";
    std::map<int32_t, Series> per_rank;
    for (const auto& p : m.memory) {
      auto& ser = per_rank[p.rank];
      ser.name = strfmt("rank %d peak", p.rank);
      ser.pts.emplace_back((static_cast<double>(p.t_ns) - static_cast<double>(m.t_min)) / 1e9,
                           static_cast<double>(p.peak) / 1048576.0);
    }
    std::vector<Series> v;
    for (auto& [r, ser] : per_rank) {
      ser.color = kSeries[static_cast<size_t>(r) % 8];
      v.push_back(ser);
    }
    o += line_chart("memory-chart", v, "time (s)", "peak memory (MiB)") + "\n";
    o += "<table id=\"memory\"><tr><th class=\"l\">sample</th><th>rank</th><th>max allocated</th><th>max reserved</th>"
         "<th>max peak</th></tr>\n";
    for (const auto& r : s.memory)
      o += "<tr><td class=\"l\">" + esc(r.label) + strfmt("</td><td>%d</td>", r.rank) + "<td>" +
           html_mib(r.max_allocated) + "</td><td>" + html_mib(r.max_reserved) + "</td><td>" + html_mib(r.max_peak) +
           "</td></tr>\n";
    o += "</table>\n";
  }
  return o;
}

}  // namespace

std::string summary_to_html(const TraceModel& m, const Summary& s, const std::string& title) {
  std::string o = html_head(m, s, title);
  o += html_headline(s);
  o += html_steps(m);
  o += html_rank_breakdown(s);
  o += html_layers(s);
  o += html_waiting(s);
  o += html_skew(s);
  o += html_memory(m, s);
  o += "<p class=\"note\">Written by ulysses-trace report; the figures are those of <code>ulysses-trace summary "
       "--json</code>.</p>\n";
  o += "</body></html>\n";
  return o;
}

}  // namespace ulysses::prof
