// Kimi-VL Chat: the message box's preview of a photo the browser cannot decode (HEIC in
// Chrome, ...): the app (ui/previews.py) sends `{kimi: {kind: "picture", name, url}}`
// once the upload is kept, and the attachment's picture (Chainlit's
// `#attachments img[alt="<name>"]`, drawn from the browser's own decoding of the file)
// shows the app's copy at `url` instead. The contract is held by
// tests/browser/test_pictures.py.
(() => {
  const copies = new Map(); // upload name -> URL of a copy every browser decodes

  const show = (img) => {
    const url = copies.get(img.alt);
    if (url && img.getAttribute("src") !== url) img.src = url;
  };
  const inBox = (node) => node instanceof HTMLImageElement && node.closest("#attachments");

  window.addEventListener("message", (event) => {
    const said = event.source === window && event.origin === location.origin && event.data?.kimi;
    if (!said || said.kind !== "picture" || typeof said.name !== "string") return;
    if (typeof said.url !== "string") return;
    const target = new URL(said.url, location.href);
    if (target.origin !== location.origin) return; // only the app's own files
    copies.set(said.name, target.href);
    for (const img of document.querySelectorAll("#attachments img")) {
      if (img.alt === said.name) show(img);
    }
  });
  // A preview drawn after the app's word (or drawn again) that the browser cannot decode.
  document.addEventListener("error", (event) => inBox(event.target) && show(event.target), true);
})();
