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
//   strings  {drop, too_big, max_mb}               the drop zone's words; the sentence
//            for a file over Chainlit's max_size_mb ({name} to fill) and that limit
//   composer {text: "..."}                         put text back in the message box
//   download {url, name}                           save a file the app made (Export)
// Page -> server, `{kimi_action: "<action>"}`.
(() => {
  const actions = new Map(); // button text -> action name
  const tooBig = { text: "", maxBytes: Infinity }; // from the app's strings

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
      if (typeof said.too_big === "string") tooBig.text = said.too_big;
      // Chainlit's page counts max_size_mb in units of 10^6 bytes (its react-dropzone maxSize).
      tooBig.maxBytes = typeof said.max_mb === "number" ? said.max_mb * 1e6 : Infinity;
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

  // A file over Chainlit's max_size_mb: Chainlit's page would drop it with an English
  // toast that names neither the file nor what to do. It is taken out of the attach here,
  // before Chainlit's handlers see it (capture phase on the window), and one sentence in
  // the chat's language names it; the other files attach and the typed text stays.
  let notice = null;
  const say = (text) => {
    notice?.remove();
    notice = document.createElement("div");
    notice.className = "kimi-notice";
    notice.setAttribute("role", "alert");
    notice.textContent = text;
    document.body.appendChild(notice);
    const shown = notice;
    setTimeout(() => shown.remove(), 10000);
  };
  // Returns the files that may go on, or null when every file may (nothing to change).
  const withoutTooBig = (files) => {
    const all = Array.from(files || []);
    const big = all.filter((file) => file.size > tooBig.maxBytes);
    if (!big.length || !tooBig.text) return null;
    const names = big.map((file) => file.name).join(", ");
    say(tooBig.text.replace("{name}", () => names));
    const rest = new DataTransfer();
    for (const file of all) if (file.size <= tooBig.maxBytes) rest.items.add(file);
    return rest;
  };
  window.addEventListener(
    "change",
    (event) => {
      const input = event.target;
      if (!(input instanceof HTMLInputElement) || input.type !== "file") return;
      const rest = withoutTooBig(input.files);
      if (!rest) return;
      input.files = rest.files; // Chainlit's handler reads what is left
      if (!rest.files.length) {
        event.stopImmediatePropagation();
        input.value = "";
      }
    },
    true,
  );
  const redropped = new WeakSet();
  window.addEventListener(
    "drop",
    (event) => {
      if (redropped.has(event) || !event.dataTransfer) return;
      const rest = withoutTooBig(event.dataTransfer.files);
      if (!rest) return;
      // A drop's files cannot be changed: the drop goes on as a new one without them
      // (Chainlit's drop zone still ends its drag state; no files: nothing attached).
      event.preventDefault();
      event.stopImmediatePropagation();
      const again = new DragEvent("drop", { bubbles: true, cancelable: true, dataTransfer: rest });
      redropped.add(again);
      event.target.dispatchEvent(again);
    },
    true,
  );
})();
