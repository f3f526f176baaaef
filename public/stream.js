// Kimi-VL Chat (config.toml: custom_js, through kimi.js): fold and unfold a reasoning step
// without rendering it again, and unfold a resumed one a little at a time.
//
// Chainlit's step is a Radix accordion: folding it takes its content off the page and
// unfolding renders all of its markdown again, which for a reasoning of thousands of
// tokens keeps the tab busy for longer than a click should take. While a step's content
// is on the page (Radix's data-state="open"), a click on the step's title hides or shows
// that content here instead; it stays mounted, so the stream goes on into it and
// unfolding only lays it out. The app sends its reasoning steps without Chainlit's
// auto_collapse (ui/reasoning_view.py): this script folds a step when its reasoning ends,
// which is when Chainlit drops the title's running style (the class loading-shimmer).
//
// A resumed chat's step comes folded and so do its blocks (ui/blocks.py: child steps whose
// titles public/style.css hides), as Chainlit's data layer does not give defaultOpen back.
// A click on the step lets Radix show it, with its blocks folded; this script then opens
// the blocks first to last, one per animation frame, so no single task renders the whole
// reasoning and the first blocks show at once.
(() => {
  const FOLDED = "data-kimi-folded";
  const RUNNING = "loading-shimmer";

  // The title of a reasoning step (Chainlit's type "llm"), not of one of its blocks.
  const isTitle = (element) =>
    element.matches("h3[data-orientation] > button") &&
    element.closest("[data-step-type]")?.getAttribute("data-step-type") === "llm";

  const regionOf = (button) => document.getElementById(button.getAttribute("aria-controls"));

  const setFolded = (button, folded) => {
    const region = regionOf(button);
    if (!region) return;
    for (const element of [button, region]) element.toggleAttribute(FOLDED, folded);
    button.setAttribute("aria-expanded", String(!folded));
  };

  // Capture phase on the document: before React's listeners on the page's root, so Radix
  // does not see a click this script handles.
  document.addEventListener(
    "click",
    (event) => {
      const button =
        event.target instanceof Element ? event.target.closest("h3[data-orientation] > button") : null;
      if (!button || !isTitle(button) || button.getAttribute("data-state") !== "open") return;
      event.preventDefault();
      event.stopPropagation();
      setFolded(button, !button.hasAttribute(FOLDED));
    },
    true,
  );

  // The blocks of a step that Radix just showed, still folded (a resumed chat): open them
  // in order, one per frame.
  const folded = [];
  let scheduled = false;
  const openSome = () => {
    scheduled = false;
    // One a frame: React renders what a click opens after the click returns (in a
    // microtask), so clicks made together would render together.
    while (folded.length) {
      const button = folded.shift();
      if (button.isConnected && button.getAttribute("data-state") === "closed") {
        button.click();
        break;
      }
    }
    if (folded.length) schedule();
  };
  const schedule = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(openSome);
    }
  };
  const isBlockTitle = (button) =>
    button.closest("[data-step-type]")?.getAttribute("data-step-type") === "undefined" &&
    button.closest('[data-step-type="llm"]') !== null;

  // A step whose reasoning ended folds, as Chainlit's auto_collapse would, but stays on the
  // page: when its title stops running, or when it first shows already ended (a busy page
  // renders the whole short reasoning at once). Each title once: a person may unfold it.
  const decided = new WeakSet();
  const settle = (button) => {
    if (
      !decided.has(button) &&
      isTitle(button) &&
      !button.classList.contains(RUNNING) &&
      button.getAttribute("data-state") === "open"
    ) {
      decided.add(button);
      setFolded(button, true);
    }
  };
  const observer = new MutationObserver((changes) => {
    for (const change of changes) {
      if (change.type === "attributes") {
        if (change.oldValue?.includes(RUNNING)) settle(change.target);
        continue;
      }
      for (const node of change.addedNodes) {
        if (node.nodeType !== Node.ELEMENT_NODE || !node.closest('[data-step-type="llm"]')) continue;
        for (const button of node.querySelectorAll("h3[data-orientation] > button")) {
          if (isBlockTitle(button)) {
            if (button.getAttribute("data-state") === "closed") {
              folded.push(button);
              schedule();
            }
          } else settle(button);
        }
      }
    }
  });
  const start = () =>
    observer.observe(document.body, {
      attributes: true,
      attributeFilter: ["class"],
      attributeOldValue: true,
      childList: true,
      subtree: true,
    });
  if (document.body) start();
  else document.addEventListener("DOMContentLoaded", start);
})();
