// Kimi-VL Chat benchmarks (bench/bench_tab.py): what a tab does while an answer streams.
// Installed before the page's own scripts (Playwright add_init_script, in a context with
// bypass_csp), the same for this app and for Open WebUI. Times are wall-clock
// milliseconds (performance.timeOrigin + performance.now()), comparable with the
// scripted server's time.time() on the same machine.
(() => {
  const now = () => performance.timeOrigin + performance.now();
  const probe = {
    frames: [],
    longTasks: [],
    events: [],
    marks: {},
    socketMarks: {},
    socketCounts: {},
    socketUrls: {},
    received: new Map(),
    watching: [],
    sentAt: null,
    leftAt: null,
  };
  window.__probe = probe;

  // Every animation frame: the gaps between them are what the person sees as smooth or not.
  const frame = () => {
    probe.frames.push(now());
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);

  // Main-thread tasks over 50 ms (the browser's definition of a Long Task).
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      probe.longTasks.push([performance.timeOrigin + entry.startTime, entry.duration]);
    }
  }).observe({ type: "longtask", buffered: true });

  // Event Timing: from a click's hardware timestamp to the next paint after its handlers.
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      probe.events.push([entry.name, performance.timeOrigin + entry.startTime, entry.duration]);
    }
  }).observe({ type: "event", durationThreshold: 16, buffered: true });

  // The moment Enter (or a click on a send button) sends the question.
  const sent = (event) => {
    if (event.type === "click" || (event.key === "Enter" && !event.shiftKey)) {
      probe.sentAt = now();
    }
  };
  document.addEventListener("keydown", sent, true);

  // Socket traffic: when the question left (the first frame sent after Enter) and when a
  // pattern's text first reached the page's script (a received frame's message event),
  // with which message on its socket since the socket opened it was (to find that frame in
  // chromium's NetLog, bench/netlog.py, where it reached the tab's network layer).
  const NativeWebSocket = window.WebSocket;
  window.WebSocket = class extends NativeWebSocket {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (event) => {
        const count = (probe.received.get(this) || 0) + 1;
        probe.received.set(this, count);
        if (!probe.watching.length || probe.sentAt === null) return;
        if (typeof event.data !== "string") return;
        for (const [name, pattern] of probe.watching) {
          if (probe.socketMarks[name] === undefined && pattern.test(event.data)) {
            probe.socketMarks[name] = now();
            probe.socketCounts[name] = count;
            probe.socketUrls[name] = this.url;
          }
        }
      });
    }
    send(data) {
      if (probe.sentAt !== null && probe.leftAt === null) probe.leftAt = now();
      super.send(data);
    }
  };

  // The first frame in which a pattern's text is in the page: a mutation that put it there,
  // then the next animation frame (the paint that shows it follows that frame's callbacks).
  const check = (node) => {
    if (!probe.watching.length) return;
    const text = node.nodeType === Node.TEXT_NODE ? node.data : node.textContent || "";
    for (const [name, pattern] of probe.watching) {
      if (probe.marks[name] === undefined && pattern.test(text)) {
        probe.marks[name] = null;
        requestAnimationFrame(() => {
          probe.marks[name] = now();
        });
      }
    }
  };
  const observer = new MutationObserver((records) => {
    for (const record of records) {
      if (record.type === "characterData") check(record.target);
      else for (const node of record.addedNodes) check(node);
    }
  });
  const start = () =>
    observer.observe(document.documentElement, {
      childList: true,
      characterData: true,
      subtree: true,
    });
  if (document.documentElement) start();
  else document.addEventListener("DOMContentLoaded", start);

  // Start watching for these patterns ({name: regex source}), forgetting earlier marks.
  probe.watch = (patterns) => {
    probe.marks = {};
    probe.socketMarks = {};
    probe.socketCounts = {};
    probe.socketUrls = {};
    probe.sentAt = null;
    probe.leftAt = null;
    probe.watching = Object.entries(patterns).map(([name, source]) => [name, new RegExp(source)]);
  };
  probe.dump = () => ({
    frames: probe.frames,
    longTasks: probe.longTasks,
    events: probe.events,
    marks: probe.marks,
    socketMarks: probe.socketMarks,
    socketCounts: probe.socketCounts,
    socketUrls: probe.socketUrls,
    sentAt: probe.sentAt,
    leftAt: probe.leftAt,
  });
})();
