// Kimi-VL Chat (loaded by public/links.js, config.toml's custom_js): what Chainlit's
// page does not do for a long chat. public/style.css draws what is set here.
(() => {
  // A long text a person sent is folded to a few lines (class kimi-folded, a fade and a
  // chevron drawn by style.css); a click or Enter on it unfolds it, and folds it again.
  const TEXTS =
    '[data-step-type="user_message"] .message-content [role="article"]:not([data-kimi-fold])';
  const FOLD_PX = 240;
  const toggle = (text) => {
    const folded = text.classList.toggle("kimi-folded");
    text.setAttribute("aria-expanded", String(!folded));
  };
  const fold = (text) => {
    const long = text.scrollHeight > FOLD_PX * 1.25; // measured once per text
    text.dataset.kimiFold = long ? "1" : "0";
    if (!long) return;
    text.tabIndex = 0;
    toggle(text);
    text.addEventListener("click", () => toggle(text));
    text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        toggle(text);
      }
    });
  };
  // The view follows a picture the app adds to an answer (a grounding overlay):
  // Chainlit scrolls when a message arrives, before its picture has loaded, and keeps
  // the person's own message at the top while the answer streams, so the overlay lands
  // below the fold. Once it has loaded it is scrolled into view, unless the person has
  // scrolled since they last sent a message. Only a picture in a message's content
  // (Chainlit's class for an inline image) is followed: a message's avatar is a picture
  // too, and loads again when Chainlit mounts the message again (as when an answer ends),
  // which had moved the view to an older message (a note above a new answer, the answer
  // then out of view).
  const SENT = '[data-step-type="user_message"]';
  const PICTURE = "img.inline-image";
  let moved = false; // scrolled by hand since the last question sent
  let pressedAt = -Infinity; // when a button on a message was pressed (the fork note below)
  const follow = (event) => {
    const picture = event.target;
    // In the answer's own step or in one of its blocks' steps (Chainlit draws those as
    // system messages): any step but the person's own message.
    const note = picture instanceof HTMLImageElement && picture.matches(PICTURE) &&
      picture.closest(`[data-step-type]:not(${SENT})`);
    const sent = document.querySelectorAll(SENT);
    const last = sent[sent.length - 1];
    if (!note || moved || !last) return;
    if (!(last.compareDocumentPosition(note) & Node.DOCUMENT_POSITION_FOLLOWING)) return;
    // The picture, not its message: the overlay sits under the answer's text, above its
    // buttons (ui/answer_view.py), so a long answer would put it below the view's end.
    const tall = picture.getBoundingClientRect().height > window.innerHeight * 0.7;
    picture.scrollIntoView({ block: tall ? "start" : "end" });
  };
  const byHand = (event) => {
    const typing = event.type === "keydown" && event.target.closest?.("input, textarea, [contenteditable]");
    if (!typing) {
      moved = true;
      pressedAt = -Infinity; // scrolled after a press: the fork note is not followed
    }
  };
  // The elements matching ``selector`` that a MutationObserver's ``changes`` added (an
  // added element itself, or inside it), in document order within each addition.
  const added = (changes, selector) =>
    changes.flatMap((change) =>
      [...change.addedNodes].flatMap((node) =>
        node.nodeType !== Node.ELEMENT_NODE
          ? []
          : node.matches(selector) ? [node] : [...node.querySelectorAll(selector)],
      ),
    );
  const newTurn = (changes) => {
    if (added(changes, SENT).length) moved = false;
  };
  // The note that an older turn is answered again (ui/notes.py NOTE_MARKS, "fork") comes
  // after the person pressed Regenerate (or Retry) under that turn, often far above the
  // chat's end, where Chainlit's page follows new messages only if its last scroll event
  // said it was at the bottom (the later turns leaving the page may or may not send
  // one): the note is scrolled towards the top of the view. With little yet below it the
  // list cannot scroll that far and ends at its bottom, so Chainlit's page then follows
  // the new answer as it streams (a long one moves the note up out of view). Only within
  // a while of a press on a message's button, so that a stored chat opened later shows
  // where Chainlit puts it.
  const FORK = '[id^="step-"][id$="00000000a005"]';
  const PRESS_TO_NOTE_MS = 10000;
  const pressed = (event) => {
    const onMessage = event.target.closest?.("[data-step-type] button");
    pressedAt = onMessage ? performance.now() : -Infinity; // a chat opened: nothing to follow
  };
  const forked = (changes) => {
    if (performance.now() - pressedAt > PRESS_TO_NOTE_MS) return;
    const note = added(changes, FORK).at(-1); // the newest
    if (!note) return;
    pressedAt = -Infinity;
    moved = false; // a new answer, as after a question sent: its picture is followed
    note.scrollIntoView({ block: "start" });
  };
  const start = () => {
    document.addEventListener("load", follow, true);
    document.addEventListener("click", pressed, true);
    for (const name of ["wheel", "touchmove", "keydown"]) {
      document.addEventListener(name, byHand, { capture: true, passive: true });
    }
    const scan = (changes) => {
      newTurn(changes);
      forked(changes);
      document.querySelectorAll(TEXTS).forEach(fold);
    };
    new MutationObserver(scan).observe(document.body, { childList: true, subtree: true });
    scan([]);
  };
  if (document.body) start();
  else document.addEventListener("DOMContentLoaded", start);
})();
