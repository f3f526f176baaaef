// Kimi-VL Chat (config.toml: custom_js). A link in a message (model or person text)
// opens in a new tab without handing that tab a reference to this one (noopener)
// or this page's address (noreferrer). Chainlit renders them with target="_blank" only.
(() => {
  const LINKS = ".message-content a[href]";
  const harden = (root) => {
    const links = root.matches?.(LINKS) ? [root] : root.querySelectorAll(LINKS);
    for (const link of links) {
      if (link.getAttribute("rel") !== "noopener noreferrer") {
        link.setAttribute("target", "_blank");
        link.setAttribute("rel", "noopener noreferrer");
      }
    }
  };
  const observer = new MutationObserver((changes) => {
    for (const change of changes) {
      for (const node of change.addedNodes) {
        if (node.nodeType === Node.ELEMENT_NODE) harden(node.closest(".message-content") || node);
      }
    }
  });
  const start = () => {
    harden(document);
    observer.observe(document.body, { childList: true, subtree: true });
  };
  if (document.body) start();
  else document.addEventListener("DOMContentLoaded", start);
})();

// A sign-in that started on a shared chat's public page (ui/share.py links to
// /login?next=/share/<id>) returns to that chat: Chainlit's sign-in page always
// goes on to "/" (history.pushState), which is turned into the shared chat here.
(() => {
  const next = new URLSearchParams(location.search).get("next") || "";
  const root = location.pathname.replace(/\/login\/?$/, "");
  const id = next.slice(root.length + "/share/".length);
  if (root === location.pathname || !next.startsWith(`${root}/share/`)) return;
  if (!/^[A-Za-z0-9-]{1,64}$/.test(id)) return; // only a share link of this app
  for (const name of ["pushState", "replaceState"]) {
    const original = history[name];
    history[name] = function (state, title, url) {
      const target = url == null ? null : new URL(url, location.href);
      if (target && target.pathname.replace(/\/$/, "") === root) {
        location.replace(`${root}/share/${id}`);
        return undefined;
      }
      return original.apply(this, [state, title, url]);
    };
  }
})();

// The page's other behaviour (folded long texts, a view that follows pictures): ux.js.
(() => {
  const script = document.createElement("script");
  const here = document.currentScript?.src || `${location.origin}/public/links.js`;
  script.src = new URL("ux.js", here).href;
  document.head.appendChild(script);
})();
// The page's side of the app's window-message bridge (ui/bridge.py): action buttons
// that stay out of the transcript, the drop zone, text put back in the message box.
{
  const here = document.currentScript?.src || `${location.origin}/public/links.js`;
  import(new URL("bridge.js", here).href);
}
