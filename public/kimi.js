// Kimi-VL Chat's script for the page (config.toml: custom_js, a module): one file per concern.
import "./links.js"; // links in messages open in a new tab, without a reference back
import "./stream.js"; // reasoning steps fold and unfold without rendering again
import "./live.js"; // the open block of a long text streams without rendering the page
import "./pictures.js"; // a photo the browser cannot decode shows the app's copy in the message box
