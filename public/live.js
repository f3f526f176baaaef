// Kimi-VL Chat (config.toml: custom_js, through kimi.js): the open block of a long text,
// shown live without rendering Chainlit's page.
//
// ui/blocks.py streams a reasoning or an answer as a run of blocks. The open block is drawn
// by Chainlit with a blank text, and its text comes as window messages
// `{kimi: {kind: "live", id, text}}` (ui/bridge.py, show_live), in order. This script
// appends that text, as text (never HTML), to an element of its own at the end of the
// block's content (`#step-<id> .message-content`); the block's markdown, blank meanwhile,
// is hidden (public/style.css, [data-kimi-live]). When the block closes, the app sends it
// its whole text: once React has drawn that (the block's own content shows text), the live
// element goes, in the same frame. A Chainlit `stream_token` renders the whole page
// (docs/facts.md); this costs the page one text append and one layout.
//
// Text for a block not on the page yet (its first words come before it) is kept until the
// block appears. Chainlit's page mounts everything again when a new chat is first stored
// (its move to /thread/<id>): the live text is then put into the block's new content.
// Text kept for a block that never appears (a closed tab's, a removed block's) is dropped
// after KEEP_MS.
//
// Chainlit follows a streaming answer by scrolling at each of its renders (its
// ScrollContainer: a spacer under the messages keeps the question at the top until the
// answer fills the view, then each render scrolls to the bottom unless the person has
// scrolled up). Here, once a frame, the spacer shrinks by what the live text grew, and
// then the view goes to the bottom unless the person has scrolled away from it.
(() => {
  const LIVE = "data-kimi-live";
  const KEEP_MS = 10000;
  const blocks = new Map(); // block id -> {text, node, box, content, height, since}
  const grown = new Set(); // blocks whose live text grew since the last frame

  const fromApp = (event) =>
    event.source === window && event.origin === location.origin && event.data?.kimi;

  const contentOf = (id) =>
    document.getElementById(`step-${id}`)?.querySelector(".message-content") ?? null;

  // The block's own content (React's) shows its final text: more than blanks and the cursor.
  const drawn = (block) => {
    for (const child of block.content.children) {
      if (child === block.box) continue;
      if (child.textContent.replace(/[\s\u200b]/g, "") || child.querySelector("img, hr, table")) {
        return true;
      }
    }
    return false;
  };

  const place = (id, block) => {
    const content = contentOf(id);
    if (!content) return;
    const box = document.createElement("div");
    box.className = "kimi-live";
    block.node = document.createTextNode(block.text);
    const cursor = document.createElement("span");
    cursor.className = "inline-block loading-cursor";
    box.append(block.node, cursor);
    content.append(box);
    content.setAttribute(LIVE, "");
    Object.assign(block, { box, content, height: 0 });
    grow(block);
  };

  const unplace = (block) => {
    block.text = block.node ? block.node.data : block.text;
    block.box?.remove();
    block.content?.removeAttribute(LIVE);
    Object.assign(block, { node: null, box: null, content: null });
  };

  const forget = (id, block) => {
    unplace(block);
    blocks.delete(id);
    grown.delete(block);
    if (!blocks.size) observer.disconnect();
  };

  const keepFor = (id, block) => {
    block.since = performance.now();
    setTimeout(() => {
      const kept = performance.now() - block.since >= KEEP_MS - 1;
      if (blocks.get(id) === block && !block.node && kept) forget(id, block);
    }, KEEP_MS);
  };

  // A block that closed blank (its whole text blanks) has nothing to draw: once React no
  // longer shows it streaming (its cursor gone), its blank live text goes too.
  const closedBlank = (block) =>
    !block.node.data.trim() && !block.content.querySelector(":scope > :not(.kimi-live) .loading-cursor");

  // After any change to the page: draw kept text, and end live text React has replaced.
  const check = () => {
    for (const [id, block] of blocks) {
      if (block.content && !block.content.isConnected) {
        unplace(block); // the page was mounted again
        keepFor(id, block);
      }
      if (!block.content) place(id, block);
      else if (drawn(block) || closedBlank(block)) forget(id, block);
    }
  };
  const observer = new MutationObserver((records) => {
    const ours = (node) => [...blocks.values()].some((block) => block.box?.contains(node));
    if (records.some((record) => !ours(record.target) && ![...record.addedNodes].every(ours))) {
      check();
    }
  });

  const add = (id, text) => {
    let block = blocks.get(id);
    if (!block) {
      if (!blocks.size) {
        observer.observe(document.body, { childList: true, characterData: true, subtree: true });
      }
      block = { text: "", node: null, box: null, content: null, height: 0, since: 0 };
      blocks.set(id, block);
      keepFor(id, block);
    }
    if (block.node) {
      block.node.appendData(text);
      grow(block);
    } else {
      block.text += text;
      place(id, block);
    }
  };

  // Once a frame: what Chainlit's page does at each of its renders to follow an answer.
  let scheduled = false;
  const grow = (block) => {
    grown.add(block);
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(follow);
    }
  };
  // The view follows the text while the question is at the top with room under it (the
  // spacer), while it is at the bottom, and while it is where this script last put it.
  const placedAt = new WeakMap(); // scroller -> the scrollTop this script set
  const follow = () => {
    scheduled = false;
    for (const block of grown) {
      if (!block.box) continue;
      const height = block.box.offsetHeight;
      const growth = height - block.height;
      block.height = height;
      const scroller = block.box.closest(".overflow-y-auto");
      if (growth <= 0 || !scroller) continue;
      const spacer = scroller.lastElementChild;
      const room = parseFloat(spacer?.style.height || "0") || 0;
      const { scrollTop, clientHeight, scrollHeight } = scroller;
      const following =
        room > 0 ||
        placedAt.get(scroller) === scrollTop ||
        scrollTop + clientHeight >= scrollHeight - growth - 10;
      if (room > 0) spacer.style.height = `${Math.max(0, room - growth)}px`;
      if (growth > room && following) {
        scroller.scrollTop = scroller.scrollHeight;
        placedAt.set(scroller, scroller.scrollTop);
      }
    }
    grown.clear();
  };

  window.addEventListener("message", (event) => {
    const said = fromApp(event);
    if (said?.kind === "live" && typeof said.id === "string" && typeof said.text === "string") {
      add(said.id, said.text);
    }
  });
})();
