// Memory pages and tables (see memory_pages.h).
#include "train/memory_pages.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/caching_allocator.h"

namespace frugal::train {

namespace {

double micros(std::int64_t ns, std::int64_t since) { return static_cast<double>(ns - since) / 1000.0; }

std::string tag_name(std::size_t t) { return std::string(memory_tag_name(static_cast<MemoryTag>(t))); }

// The page's data: times in microseconds since the step began, bytes by tag per point.
nlohmann::json timeline_data(const MemoryTimeline& timeline) {
  const std::vector<TimelinePoint> points = timeline_points(timeline);
  const TimelinePeak peak = timeline_peak(timeline, points);
  nlohmann::json tags = nlohmann::json::array(), times = nlohmann::json::array(), bytes = nlohmann::json::array(),
                 reserved = nlohmann::json::array(), phases = nlohmann::json::array(), layers = nlohmann::json::array(),
                 nodes = nlohmann::json::array();
  for (std::size_t t = 0; t < kNumMemoryTags; ++t) tags.push_back(tag_name(t));
  for (const TimelinePoint& p : points) {
    times.push_back(micros(p.time_ns, timeline.begin_ns));
    bytes.push_back(p.bytes);
    reserved.push_back(p.reserved);
  }
  for (const TimelineMark& m : timeline.phases)
    phases.push_back({m.name, micros(m.begin_ns, timeline.begin_ns), micros(m.end_ns, timeline.begin_ns)});
  for (const TimelineMark& m : timeline.layers)
    layers.push_back({m.name, m.depth, micros(m.begin_ns, timeline.begin_ns), micros(m.end_ns, timeline.begin_ns)});
  for (const TimelineMark& m : timeline.backward_nodes)
    nodes.push_back({m.name, m.depth, micros(m.begin_ns, timeline.begin_ns), micros(m.end_ns, timeline.begin_ns)});
  return {{"step", timeline.step},
          {"device", timeline.device},
          {"end", micros(timeline.end_ns, timeline.begin_ns)},
          {"tags", tags},
          {"t", times},
          {"bytes", bytes},
          {"reserved", reserved},
          {"phases", phases},
          {"layers", layers},
          {"backward_nodes", nodes},
          {"peak", {{"bytes", peak.point.allocated()}, {"phase", peak.phase}, {"layer", peak.layer}}}};
}

// The page around the data; the script draws everything from `timeline` and leaves the figures it
// computed in the DOM (ids peak-bytes, max-TAG; body data-drawn), where a headless browser's test
// reads them.
constexpr const char* kPageHead = R"page(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>frugal: memory of one training step</title>
<style>
body { font: 14px sans-serif; margin: 20px; color: #222; background: #fff; }
svg { border: 1px solid #ccc; background: #fcfcfc; }
table { border-collapse: collapse; margin-top: 12px; }
td, th { padding: 2px 12px; text-align: right; border-bottom: 1px solid #ddd; }
td:first-child, th:first-child { text-align: left; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; vertical-align: middle; }
#tip { position: absolute; background: #fff; border: 1px solid #888; padding: 4px 6px; font-size: 12px;
       pointer-events: none; display: none; white-space: pre; }
</style></head><body>
<h1 id="title">Memory of one training step</h1>
<p id="summary"></p>
<svg id="chart" width="1100" height="540" xmlns="http://www.w3.org/2000/svg"></svg>
<div id="tip"></div>
<table id="tags"><thead><tr><th>tag</th><th>at the step's start</th><th>highest in the step</th><th>at the peak</th></tr></thead>
<tbody></tbody></table>
<p>Bytes are the allocator's blocks (requests rounded up to its block sizes). Hover over the chart for the bytes at a moment.</p>
<script>const timeline = )page";

constexpr const char* kPageScript = R"page(;</script>
<script>
(function () {
  const d = timeline, n = d.t.length, tags = d.tags;
  const colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"];
  const phaseColors = {"forward": "#9ecae1", "backward": "#fdae6b", "optimizer step": "#a1d99b"};
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.getElementById("chart");
  const total = i => d.bytes[i].reduce((a, b) => a + b, 0);
  const size = b => {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = b, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
    return u === 0 ? b + " B" : v.toFixed(2) + " " + units[u];
  };
  const add = (parent, name, attributes, text) => {
    const e = document.createElementNS(svgNS, name);
    for (const key in attributes) e.setAttribute(key, attributes[key]);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  };
  // The innermost mark ([name, depth, begin, end] or [name, begin, end]) holding time t.
  const innermost = (marks, t) => {
    let found = null;
    for (const m of marks) {
      const depth = m.length === 4 ? m[1] : 0, b = m[m.length - 2], e = m[m.length - 1];
      if (b <= t && t <= e && (found === null || depth > found.depth)) found = {name: m[0], depth: depth};
    }
    return found === null ? "" : found.name;
  };

  let peak = 0;
  for (let i = 1; i < n; ++i) if (total(i) > total(peak)) peak = i;
  const tagMax = tags.map(() => 0);
  let top = 0;
  for (let i = 0; i < n; ++i) {
    d.bytes[i].forEach((b, k) => { tagMax[k] = Math.max(tagMax[k], b); });
    top = Math.max(top, d.reserved[i], total(i));
  }
  top = Math.max(top * 1.05, 1);

  const L = 90, R = 40, T = 80, H = 400, W = svg.width.baseVal.value - L - R;
  const end = Math.max(d.end, d.t[n - 1], 1e-3);
  const x = t => L + t / end * W, y = b => T + H - b / top * H;

  // Axes: bytes on the left, milliseconds below.
  for (let k = 0; k <= 5; ++k) {
    const b = top * k / 5;
    add(svg, "line", {x1: L, x2: L + W, y1: y(b), y2: y(b), stroke: "#e4e4e4"});
    add(svg, "text", {x: L - 6, y: y(b) + 4, "text-anchor": "end", "font-size": 11}, size(Math.round(b)));
  }
  for (let k = 0; k <= 10; ++k) {
    const t = end * k / 10;
    add(svg, "text", {x: x(t), y: T + H + 16, "text-anchor": "middle", "font-size": 11}, (t / 1000).toFixed(1) + " ms");
  }
  add(svg, "text", {x: L + W / 2, y: T + H + 34, "text-anchor": "middle", "font-size": 12}, "time since the step began");

  // The stacked areas: memory holds its value until the next event, so each edge is a staircase.
  const lower = new Array(n).fill(0);
  tags.forEach((tag, k) => {
    let upperEdge = "", lowerEdge = "";
    for (let i = 0; i < n; ++i) {
      const x0 = x(d.t[i]), x1 = x(i + 1 < n ? d.t[i + 1] : end), hi = lower[i] + d.bytes[i][k];
      upperEdge += (i === 0 ? "M" : "L") + x0.toFixed(2) + "," + y(hi).toFixed(2) + "L" + x1.toFixed(2) + "," + y(hi).toFixed(2);
    }
    for (let i = n - 1; i >= 0; --i) {
      const x0 = x(d.t[i]), x1 = x(i + 1 < n ? d.t[i + 1] : end);
      lowerEdge += "L" + x1.toFixed(2) + "," + y(lower[i]).toFixed(2) + "L" + x0.toFixed(2) + "," + y(lower[i]).toFixed(2);
    }
    for (let i = 0; i < n; ++i) lower[i] += d.bytes[i][k];
    if (tagMax[k] > 0) add(svg, "path", {"class": "area", "data-tag": tag, d: upperEdge + lowerEdge + "Z", fill: colors[k], stroke: "none"});
  });
  let reserved = "";
  for (let i = 0; i < n; ++i) {
    const x1 = x(i + 1 < n ? d.t[i + 1] : end);
    reserved += (i === 0 ? "M" : "L") + x(d.t[i]).toFixed(2) + "," + y(d.reserved[i]).toFixed(2) + "L" + x1.toFixed(2) + "," + y(d.reserved[i]).toFixed(2);
  }
  add(svg, "path", {id: "reserved-line", d: reserved, fill: "none", stroke: "#000", "stroke-width": 1.5});
  add(svg, "text", {x: L + W - 4, y: y(d.reserved[n - 1]) - 5, "text-anchor": "end", "font-size": 11}, "reserved");

  // Bands above the chart: the phases, then the modules directly under the model.
  add(svg, "text", {x: L - 6, y: 34, "text-anchor": "end", "font-size": 11}, "phase");
  for (const [name, b, e] of d.phases) {
    add(svg, "rect", {"class": "phase", x: x(b), y: 22, width: Math.max(x(e) - x(b), 0.5), height: 18, fill: phaseColors[name] || "#ccc"});
    if (x(e) - x(b) > 60) add(svg, "text", {x: (x(b) + x(e)) / 2, y: 35, "text-anchor": "middle", "font-size": 11}, name);
    add(svg, "line", {x1: x(b), x2: x(b), y1: 22, y2: T + H, stroke: "#999", "stroke-dasharray": "2,3"});
  }
  const depths = d.layers.map(m => m[1]).filter(depth => depth > 1);
  const band = depths.length ? Math.min(...depths) : 1;
  add(svg, "text", {x: L - 6, y: 58, "text-anchor": "end", "font-size": 11}, "module");
  d.layers.filter(m => m[1] === band).forEach(([name, depth, b, e], i) => {
    add(svg, "rect", {"class": "layer", x: x(b), y: 46, width: Math.max(x(e) - x(b), 0.5), height: 16, fill: i % 2 ? "#d9d9d9" : "#bdbdbd"});
    if (x(e) - x(b) > 8 * name.length) add(svg, "text", {x: (x(b) + x(e)) / 2, y: 58, "text-anchor": "middle", "font-size": 10}, name);
  });

  // The peak.
  const peakBytes = total(peak), peakPhase = innermost(d.phases, d.t[peak]), peakLayer = innermost(d.layers, d.t[peak]) || innermost(d.backward_nodes, d.t[peak]);
  add(svg, "line", {id: "peak-line", x1: x(d.t[peak]), x2: x(d.t[peak]), y1: T, y2: T + H, stroke: "#d62728", "stroke-width": 1.5});
  add(svg, "text", {x: x(d.t[peak]) + 4, y: T + 12, "font-size": 11, fill: "#d62728"}, "peak " + size(peakBytes));

  document.getElementById("title").textContent = "Memory of training step " + d.step + " on " + d.device;
  document.getElementById("summary").innerHTML =
    "Peak: <b id=\"peak-bytes\" data-bytes=\"" + peakBytes + "\">" + size(peakBytes) + "</b> allocated at " +
    (d.t[peak] / 1000).toFixed(2) + " ms, in <b id=\"peak-phase\"></b>, module <b id=\"peak-layer\"></b>. " +
    "Reserved at most <b id=\"reserved-max\" data-bytes=\"" + Math.max(...d.reserved) + "\">" + size(Math.max(...d.reserved)) + "</b>; " +
    "<span id=\"events\">" + (n - 1) + "</span> allocator events.";
  document.getElementById("peak-phase").textContent = peakPhase || "(between phases)";
  document.getElementById("peak-layer").textContent = peakLayer || "(none: no module or backward node was running)";

  const body = document.querySelector("#tags tbody");
  tags.forEach((tag, k) => {
    const row = body.insertRow();
    row.insertCell().innerHTML = "<span class=\"swatch\" style=\"background:" + colors[k] + "\"></span>" + tag;
    row.insertCell().textContent = size(d.bytes[0][k]);
    const highest = row.insertCell();
    highest.id = "max-" + tag;
    highest.dataset.bytes = tagMax[k];
    highest.textContent = size(tagMax[k]);
    row.insertCell().textContent = size(d.bytes[peak][k]);
  });

  // The bytes at the pointer's moment.
  const tip = document.getElementById("tip");
  svg.addEventListener("mousemove", event => {
    const box = svg.getBoundingClientRect(), t = (event.clientX - box.left - L) / W * end;
    if (t < 0 || t > end) { tip.style.display = "none"; return; }
    let i = 0;
    while (i + 1 < n && d.t[i + 1] <= t) ++i;
    tip.textContent = (t / 1000).toFixed(2) + " ms  " + (innermost(d.phases, t) || "-") + "  " + (innermost(d.layers, t) || innermost(d.backward_nodes, t) || "") + "\n" +
      tags.map((tag, k) => tag + ": " + size(d.bytes[i][k])).join("\n") + "\nallocated: " + size(total(i)) + "\nreserved: " + size(d.reserved[i]);
    tip.style.display = "block";
    tip.style.left = (event.pageX + 12) + "px";
    tip.style.top = (event.pageY + 12) + "px";
  });
  svg.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  document.body.dataset.drawn = "yes";
})();
</script>
</body></html>
)page";

std::string cell(std::size_t bytes) { return format_size(bytes); }

// "| a | b |\n"
std::string markdown_row(const std::vector<std::string>& cells) {
  std::string row = "|";
  for (const std::string& c : cells) row += " " + c + " |";
  return row + "\n";
}

// Text a mermaid label can hold inside double quotes: no quote, and no ';' or '#', which mermaid
// reads as a statement's end and an entity.
std::string mermaid_text(std::string text) {
  for (char& c : text)
    if (c == '"') c = '\'';
    else if (c == ';' || c == '#') c = ',';
  return text;
}

// The start line's data part: after "model, N parameters, on DEVICE; ", before "; N steps per epoch".
std::string data_part(const std::string& description) {
  const std::size_t first = description.find("; "), last = description.rfind("; ");
  if (first == std::string::npos) return description;
  return description.substr(first + 2, last > first ? last - first - 2 : std::string::npos);
}

std::string decimals(double value, int count) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", count, value);
  return text;
}

std::string span_name(const PhaseSpan& s) {
  if (s.phase == Phase::setup) return "setup (data, model)";
  return std::string(s.phase == Phase::epoch ? "epoch " : "evaluation after epoch ") + std::to_string(s.epoch + 1);
}

}  // namespace

std::string memory_timeline_html(const MemoryTimeline& timeline) {
  const std::string data = timeline_data(timeline).dump();
  std::string page(kPageHead);
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '/' && i > 0 && data[i - 1] == '<') page += '\\';  // "</" would end the script; "<\/" is the same to JavaScript
    page += data[i];
  }
  page += kPageScript;
  return page;
}

nlohmann::json memory_timeline_chrome_trace(const MemoryTimeline& timeline) {
  constexpr int kPhaseThread = 1000, kModuleThread = 1001, kNodeThread = 1002;  // beside the allocator's stream ids
  nlohmann::json trace = nlohmann::json::parse(timeline.allocator_trace);
  nlohmann::json& events = trace["traceEvents"];
  const auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "frugal train: step " + std::to_string(timeline.step) + " on " + timeline.device}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", kPhaseThread}, {"args", {{"name", "phases"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", kModuleThread}, {"args", {{"name", "modules"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", kNodeThread}, {"args", {{"name", "backward nodes"}}}});
  for (const TimelinePoint& p : timeline_points(timeline)) {
    nlohmann::json by_tag = nlohmann::json::object();
    for (std::size_t t = 0; t < kNumMemoryTags; ++t) by_tag[tag_name(t)] = p.bytes[t];
    events.push_back({{"name", "allocated by tag"}, {"ph", "C"}, {"ts", us(p.time_ns)}, {"pid", 0}, {"args", by_tag}});
    events.push_back({{"name", "reserved"}, {"ph", "C"}, {"ts", us(p.time_ns)}, {"pid", 0}, {"args", {{"reserved", p.reserved}}}});
  }
  const auto slice = [&](const TimelineMark& m, int thread) {
    const char* category = thread == kPhaseThread ? "phase" : thread == kModuleThread ? "module" : "backward node";
    events.push_back({{"name", m.name}, {"cat", category}, {"ph", "X"},
                      {"ts", us(m.begin_ns)}, {"dur", us(m.end_ns - m.begin_ns)}, {"pid", 0}, {"tid", thread}});
  };
  for (const TimelineMark& m : timeline.phases) slice(m, kPhaseThread);
  for (const TimelineMark& m : timeline.layers) slice(m, kModuleThread);
  for (const TimelineMark& m : timeline.backward_nodes) slice(m, kNodeThread);
  return trace;
}

void set_planned_peaks(MemoryReport& report, const MemoryPlan& plan) {
  constexpr std::array<std::pair<const char*, Phase>, 4> kSameAs = {
      {{"init", Phase::setup}, {"forward", Phase::forward}, {"backward", Phase::backward}, {"optimizer step", Phase::optimizer}}};
  for (const PhasePlan& planned : plan.phases)
    for (const auto& [name, phase] : kSameAs)
      if (planned.name == name) report.planned_peak[static_cast<std::size_t>(phase)] = static_cast<std::size_t>(planned.peak_bytes);
}

namespace {

std::optional<std::size_t> planned_peak(const MemoryReport& report, Phase phase) {
  return report.planned_peak[static_cast<std::size_t>(phase)];
}

}  // namespace

std::string memory_report_text(const MemoryReport& report) {
  std::ostringstream out;
  char line[240];
  std::snprintf(line, sizeof line, "%-16s %12s %12s %12s %13s %15s %12s %12s %6s\n", "memory by phase", "allocated", "reserved",
                "peak", "planned peak", "inactive split", "host RSS", "pinned host", "runs");
  out << line;
  for (const PhaseMemory& m : report.phases) {
    const std::optional<std::size_t> planned = planned_peak(report, m.phase);
    std::snprintf(line, sizeof line, "%-16s %12s %12s %12s %13s %15s %12s %12s %6lld\n", std::string(phase_name(m.phase)).c_str(),
                  cell(m.allocated).c_str(), cell(m.reserved).c_str(), cell(m.peak).c_str(), planned ? cell(*planned).c_str() : "-",
                  cell(m.inactive_split).c_str(), cell(m.host_rss).c_str(), cell(m.pinned_host).c_str(), static_cast<long long>(m.runs));
    out << line;
  }
  out << "empty_cache()    reserved " << format_size(report.reserved_before_empty_cache) << " before, "
      << format_size(report.reserved_after_empty_cache) << " after\n";
  return out.str();
}

nlohmann::ordered_json memory_report_json(const MemoryReport& report) {
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (const PhaseMemory& m : report.phases) {
    const std::optional<std::size_t> planned = planned_peak(report, m.phase);
    phases.push_back({{"phase", phase_name(m.phase)},
                      {"runs", m.runs},
                      {"allocated_bytes", m.allocated},
                      {"reserved_bytes", m.reserved},
                      {"peak_bytes", m.peak},
                      {"planned_peak_bytes", planned ? nlohmann::ordered_json(*planned) : nlohmann::ordered_json(nullptr)},
                      {"inactive_split_bytes", m.inactive_split},
                      {"host_rss_bytes", m.host_rss},
                      {"pinned_host_bytes", m.pinned_host}});
  }
  return {{"phases", phases},
          {"empty_cache",
           {{"reserved_before_bytes", report.reserved_before_empty_cache},
            {"reserved_after_bytes", report.reserved_after_empty_cache}}}};
}

std::string run_report_markdown(const RunReport& r) {
  const TrainOptions& o = r.options;
  const TrainResult& result = r.result;
  std::ostringstream out;
  out << "# frugal train: " << result.model << " on " << result.device << "\n\n";
  out << r.description << ".\n\n";
  out << "## Configuration\n\n| option | value |\n|---|---|\n";
  const nlohmann::ordered_json identity = nlohmann::ordered_json::parse(run_identity_json(o));
  for (const auto& [key, value] : identity.items())
    out << markdown_row({identity_key_flags(key), value.is_string() ? value.get<std::string>() : value.dump()});
  out << markdown_row({"--data", o.data.empty() ? "Debian's Fashion-MNIST" : o.data});
  out << markdown_row({"--steps", o.steps ? std::to_string(*o.steps) : "all"});
  out << markdown_row({"--checkpoint-activations", o.checkpoint_activations ? "true" : "false"});
  out << markdown_row({"--checkpoint-blocks", models::checkpointed_blocks(o.checkpoint_activations, o.checkpoint_blocks).str()});
  out << markdown_row({"--inplace-activations", o.inplace_activations ? "true" : "false"});
  out << markdown_row({"--device", result.device});
  out << markdown_row({"--memory-limit", o.memory_limit ? format_size(*o.memory_limit) : "none"});
  out << markdown_row({"--workers", std::to_string(o.workers)});

  out << "\n## Result\n\n| | |\n|---|---|\n";
  out << markdown_row({"steps", std::to_string(result.steps) + (result.stopped_early ? " (stopped early)" : "")});
  out << markdown_row({"epochs completed", std::to_string(result.epochs)});
  out << markdown_row({"final training loss", decimals(result.final_loss, 4)});
  if (result.test) out << markdown_row({"test accuracy", decimals(100.0 * result.test->accuracy, 2) + "%"});
  out << markdown_row({"wall time", decimals(result.wall_seconds, 1) + " s"});
  out << markdown_row({"training images/s", decimals(result.images_per_sec, 1)});

  const std::string data_name = data_part(r.description);
  out << "\n## What was trained on what\n\n```mermaid\nflowchart LR\n";
  out << "  data[\"" << mermaid_text(data_name) << "\"] -->|\"batches of " << o.batch_size
      << (o.accum > 1 ? ", " + std::to_string(o.accum) + " per step" : std::string()) << "\"| model\n";
  out << "  model[\"" << result.model << ", " << result.parameters << " parameters\"] -->|logits| loss[\"cross-entropy\"]\n";
  out << "  loss -->|gradients| optimizer[\"" << optimizer_name(o.optimizer) << ", " << schedule_name(o.schedule)
      << " schedule\"]\n";
  out << "  optimizer -->|updates| model\n";
  out << "  device[\"" << result.device << "\"] -.-|holds| model\n```\n";

  out << "\n## Measured phases\n\nSeconds since the run started.\n\n```mermaid\ngantt\n  dateFormat x\n"
         "  axisFormat %M:%S\n";
  for (const PhaseSpan& s : r.spans) {
    const auto begin = static_cast<long long>(s.start_seconds * 1000.0);
    const auto end = std::max(begin + 1, static_cast<long long>((s.start_seconds + s.seconds) * 1000.0));
    out << "  section " << (s.phase == Phase::setup ? "setup" : s.phase == Phase::epoch ? "training" : "evaluation") << "\n";
    out << "  " << span_name(s) << " :" << begin << ", " << end << "\n";
  }
  out << "```\n\n| phase | start (s) | duration (s) |\n|---|---|---|\n";
  for (const PhaseSpan& s : r.spans)
    out << markdown_row({span_name(s), decimals(s.start_seconds, 2), decimals(s.seconds, 2)});

  out << "\n## Memory\n\nPeak allocated " << format_size(result.peak_allocated_bytes) << ", reserved "
      << format_size(result.peak_reserved_bytes) << ".\n\n| tag | peak bytes (as requested) |\n|---|---|\n";
  for (std::size_t t = 0; t < kNumMemoryTags; ++t) out << markdown_row({tag_name(t), format_size(result.peak_bytes_by_tag[t])});
  if (r.step_peak)
    out << "\nIn step " << r.step << " the peak was " << format_size(r.step_peak->point.allocated()) << ", in "
        << (r.step_peak->phase.empty() ? "no phase" : r.step_peak->phase) << ", module "
        << (r.step_peak->layer.empty() ? "none" : r.step_peak->layer) << ".\n";
  out << "\n| phase | allocated | reserved | peak | planned peak | inactive split | host RSS | pinned host | runs |\n"
         "|---|---|---|---|---|---|---|---|---|\n";
  for (const PhaseMemory& m : r.memory.phases) {
    const std::optional<std::size_t> planned = planned_peak(r.memory, m.phase);
    out << markdown_row({std::string(phase_name(m.phase)), cell(m.allocated), cell(m.reserved), cell(m.peak),
                         planned ? cell(*planned) : "-", cell(m.inactive_split), cell(m.host_rss), cell(m.pinned_host), std::to_string(m.runs)});
  }
  out << "\n`empty_cache()` at the end: reserved " << format_size(r.memory.reserved_before_empty_cache) << " before, "
      << format_size(r.memory.reserved_after_empty_cache) << " after.\n";
  return out.str();
}

}  // namespace frugal::train
