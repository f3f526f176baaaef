// Kimi-VL Chat (config.toml: custom_js, through kimi.js): the open block of a long text,
// shown live without rendering Chainlit's page.
//
// ui/blocks.py streams a reasoning or an answer as a run of blocks. The open block is drawn
// by Chainlit with a blank text, and its text comes as window messages
// `{kimi: {kind: "live", id, text}}` (ui/bridge.py, show_live), in order, then
// `{kimi: {kind: "live_end", id}}` once the block has been sent its whole text. This script
// appends the text, as text (never HTML), to an element of its own at the end of the
// block's content (`#step-<id> .message-content`); the block's markdown, blank meanwhile, is
// hidden (public/style.css, [data-kimi-live]). Once React has drawn the whole text (the
// block's own content shows text), the live element goes, in the same frame; after
// `live_end` it goes at the latest END_MS later (a text that draws as nothing). A Chainlit
// `stream_token` renders the whole page (docs/facts.md); this costs the page one text
// append and one layout.
//
// Chainlit's page forwards every window message to the server (its AppWrapper); live text
// is the server's own, so this script's listener, first in line (capture), keeps it here.
//
// Text for a block not on the page yet (its first words come before it) is kept until the
// block appears. Chainlit's page mounts everything again when a new chat is first stored
// (its move to /thread/<id>): the live text is then put into the block's new content.
// Text kept for a block that does not appear within KEEP_MS of its last text (a removed
// block's) is dropped.
//
// Chainlit follows a streaming answer at each of its renders (its ScrollContainer: a spacer
// under the messages keeps the question at the top until the answer fills the view; then,
// unless the person has scrolled away from the bottom since sending, each render scrolls to
// the bottom). Here, once a frame, the spacer shrinks by what the live text grew, and the
// view goes to the bottom on the same condition. What else moves the text down in a frame
// (a step's frame or a block drawn by React before Chainlit's effect has sized the spacer
// again, a picture) is followed too: the view scrolls until the text's end is in it.
//
// The view is the element that scrolls the messages, found by what it does, not by its
// classes: the block's nearest ancestor whose computed overflow-y is auto or scroll (Chainlit
// nests two such areas, ScrollContainer.tsx; an absolutely positioned element in a message,
// such as KaTeX's MathML copy, once made the outer one scroll too: public/style.css). While
// the view follows, any scroll area around it that hides the view's bottom is brought back
// to it. tests/browser/test_follow.py holds this: the streaming text in view at every frame
// after wheel and touch scrolls.
(() => {
  const LIVE = "data-kimi-live";
  const KEEP_MS = 10000;
  const END_MS = 1000;
  const blocks = new Map(); // block id -> {text, node, box, content, height, since, view}
  const grown = new Set(); // blocks whose live text grew, or moved, since the last frame

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

  const place = (block, content) => {
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

  // Text kept for a block not on the page goes KEEP_MS after its last text.
  const keep = (id, block) => {
    block.since = performance.now();
    setTimeout(() => {
      const idle = performance.now() - block.since >= KEEP_MS - 1;
      if (blocks.get(id) === block && !block.node && idle) forget(id, block);
    }, KEEP_MS);
  };

  // Put the block's text on the page if it is not, or end it if React has drawn it.
  const settle = (id, block) => {
    if (block.content && !block.content.isConnected) {
      unplace(block); // the page was mounted again
      keep(id, block);
    }
    if (!block.content) {
      const content = contentOf(id);
      if (content) place(block, content);
    }
    if (block.content && drawn(block)) forget(id, block);
  };

  const ours = (node) => {
    for (const block of blocks.values()) if (block.box?.contains(node)) return true;
    return false;
  };
  const changedByPage = (record) =>
    !ours(record.target) &&
    (record.type === "characterData" ||
      [...record.addedNodes, ...record.removedNodes].some((node) => !ours(node)));
  // A change of the page's own (a block drawn, a step's frame, a picture) may move the text
  // down without making it longer: the next frame follows it too.
  const observer = new MutationObserver((records) => {
    if (!records.some(changedByPage)) return;
    for (const [id, block] of blocks) {
      settle(id, block);
      if (block.box) grow(block);
    }
  });

  const add = (id, text) => {
    let block = blocks.get(id);
    if (!block) {
      if (!blocks.size) {
        observer.observe(document.body, { childList: true, characterData: true, subtree: true });
      }
      block = { text: "", node: null, box: null, content: null, height: 0, since: 0, view: null };
      blocks.set(id, block);
    }
    if (block.node) {
      block.node.appendData(text);
      grow(block);
      return;
    }
    block.text += text;
    keep(id, block);
    settle(id, block);
  };

  const end = (id) => {
    const block = blocks.get(id);
    if (block) setTimeout(() => blocks.get(id) === block && forget(id, block), END_MS);
  };

  // Whether the view follows the text: from a question sent until the person scrolls up,
  // away from the bottom, and again once they scroll back to it (a scroll of the messages
  // within a second of their wheel, touch, key or pointer; Chainlit's own scrolls after a
  // send do not count). A scroll down that stops short of the bottom changes nothing.
  let following = true;
  let touchedAt = -Infinity;
  const scrolledTo = new WeakMap(); // scroll area -> its scrollTop at its last scroll event
  const sent = () => {
    following = true;
    touchedAt = -Infinity;
  };
  const touched = () => {
    touchedAt = performance.now();
  };
  for (const type of ["wheel", "touchmove", "pointerdown", "keydown"]) {
    document.addEventListener(type, touched, { capture: true, passive: true });
  }
  document.addEventListener(
    "keydown",
    (event) => {
      if (event.key === "Enter" && !event.shiftKey && event.target?.id === "chat-input") sent();
    },
    true,
  );
  document.addEventListener(
    "click",
    (event) => {
      if (event.target instanceof Element && event.target.closest("#chat-submit")) sent();
    },
    true,
  );
  document.addEventListener(
    "scroll",
    (event) => {
      const view = event.target;
      if (!(view instanceof Element)) return;
      const was = scrolledTo.get(view) ?? 0;
      scrolledTo.set(view, view.scrollTop);
      if (performance.now() - touchedAt > 1000) return;
      if (!view.querySelector("[data-step-type]")) return; // not the messages
      if (view.scrollTop + view.clientHeight >= view.scrollHeight - 10) following = true;
      else if (view.scrollTop < was) following = false;
    },
    { capture: true, passive: true },
  );

  // Once a frame: what Chainlit's page does at each of its renders to follow an answer.
  let scheduled = false;
  const grow = (block) => {
    grown.add(block);
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(follow);
    }
  };
  const follow = () => {
    scheduled = false;
    for (const block of grown) {
      if (!block.box) continue;
      const height = block.box.offsetHeight;
      const growth = height - block.height;
      block.height = height;
      block.view = block.view?.contains(block.box) ? block.view : scrollerOf(block.box);
      const view = block.view;
      if (!view) continue;
      const spacer = view.lastElementChild;
      const isSpacer = spacer && !spacer.querySelector("[data-step-type]"); // not the messages
      const room = isSpacer ? parseFloat(spacer.style.height || "0") || 0 : 0;
      if (growth > 0 && room > 0) spacer.style.height = `${Math.max(0, room - growth)}px`;
      if (!following) continue;
      const under = below(block.box, view);
      if (growth > room) view.scrollTop = view.scrollHeight;
      else if (under > 0) view.scrollTop += under;
      else continue;
      reveal(view);
    }
    grown.clear();
  };
  // How far the text's end is under the view's visible bottom (px; negative: above it).
  const below = (box, view) =>
    box.getBoundingClientRect().bottom -
    (view.getBoundingClientRect().top + view.clientTop + view.clientHeight);

  const scrolls = (element) => /^(auto|scroll)$/.test(getComputedStyle(element).overflowY);
  const scrollerOf = (element) => {
    for (let e = element.parentElement; e && e !== document.body; e = e.parentElement) {
      if (scrolls(e)) return e;
    }
    return null;
  };
  // Every scroll area around the view that has something to scroll ends where the view ends.
  const reveal = (view) => {
    for (let outer = view.parentElement; outer !== document.body; outer = outer.parentElement) {
      if (!outer) return;
      if (outer.scrollHeight > outer.clientHeight && scrolls(outer)) {
        const shown = outer.getBoundingClientRect().top + outer.clientTop + outer.clientHeight;
        const off = view.getBoundingClientRect().bottom - shown;
        if (Math.abs(off) >= 1) outer.scrollTop += off;
      }
    }
  };

  window.addEventListener(
    "message",
    (event) => {
      const said = fromApp(event);
      if (typeof said?.id !== "string") return;
      if (said.kind === "live" && typeof said.text === "string") add(said.id, said.text);
      else if (said.kind === "live_end") end(said.id);
      else return;
      event.stopImmediatePropagation(); // not back to the server (Chainlit's AppWrapper)
    },
    true,
  );
})();
