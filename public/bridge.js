// Kimi-VL Chat: the page's side of ui/bridge.py (loaded by links.js).
//
// The app talks to this script through Chainlit's public window-message channel:
// the server's `send_window_message(data)` reaches this window as a `message` event
// (Chainlit posts it to `window.parent`, which is this window outside a frame), and a
// message this script posts to its own window goes to the server's
// `@cl.on_window_message` (Chainlit's page forwards every window message). Nothing here
// reads model or person text as HTML: texts are set with textContent or as values.
//
// Server -> page, `{kimi: {kind, ...}}`:
//   actions  {ids: {"<button text>": "<action>"}}  these composer buttons run an action
//            on the server at a click, instead of becoming a message
//   strings  {drop: "..."}                         the drop zone's words
//   composer {text: "..."}                         put text back in the message box
//   download {url, name}                           save a file the app made (Export)
// Page -> server, `{kimi_action: "<action>"}`.
(() => {
  const actions = new Map(); // button text -> action name

  const fromApp = (event) =>
    event.source === window && event.origin === location.origin && event.data?.kimi;

  const setComposer = (text) => {
    const input = document.getElementById("chat-input");
    if (!input || typeof text !== "string") return;
    // The message box is React's: set its value the way typing does, then say so.
    const proto = Object.getPrototypeOf(input);
    const setter = Object.getOwnPropertyDescriptor(proto, "value")?.set;
    if (setter) setter.call(input, text);
    else input.value = text;
    input.dispatchEvent(new Event("input", { bubbles: true }));
    input.focus();
  };

  const download = (url, name) => {
    const target = new URL(url, location.href);
    if (target.origin !== location.origin) return; // only the app's own files
    const link = document.createElement("a");
    link.href = target.href;
    link.download = typeof name === "string" ? name : "";
    link.style.display = "none";
    document.body.appendChild(link);
    link.click();
    link.remove();
  };

  window.addEventListener("message", (event) => {
    const said = fromApp(event);
    if (!said || typeof said !== "object") return;
    if (said.kind === "actions" && said.ids && typeof said.ids === "object") {
      actions.clear();
      for (const [text, action] of Object.entries(said.ids)) actions.set(text, action);
    } else if (said.kind === "strings" && typeof said.drop === "string") {
      document.documentElement.style.setProperty("--kimi-drop-text", JSON.stringify(said.drop));
    } else if (said.kind === "composer") {
      setComposer(said.text);
    } else if (said.kind === "download" && typeof said.url === "string") {
      download(said.url, said.name);
    }
  });

  // A click on one of the app's action buttons (Chainlit draws them as composer
  // commands, `#command-<text>`) runs the action; Chainlit never sees the click, so
  // nothing is selected and no message is sent.
  window.addEventListener(
    "click",
    (event) => {
      const button = event.target instanceof Element ? event.target.closest("button") : null;
      const id = button?.id || "";
      if (!id.startsWith("command-")) return;
      const action = actions.get(id.slice("command-".length));
      if (!action) return;
      event.preventDefault();
      event.stopPropagation();
      window.postMessage({ kimi_action: action }, location.origin);
    },
    true,
  );

  // A file dragged over the page shows where it can be dropped (style.css draws it).
  let depth = 0;
  const carriesFiles = (event) => Array.from(event.dataTransfer?.types || []).includes("Files");
  const dragging = (on) => document.body.classList.toggle("kimi-dragging", on);
  window.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    dragging(true);
  });
  window.addEventListener("dragleave", (event) => {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (depth === 0) dragging(false);
  });
  for (const name of ["drop", "dragend"]) {
    window.addEventListener(name, () => {
      depth = 0;
      dragging(false);
    });
  }
})();
