// Kimi-VL Chat (config.toml: custom_js): a link in a message (model or person text)
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
