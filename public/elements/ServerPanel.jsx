// The live server panel (ui/server_panel.py): a markdown table that asks the app
// for a fresh copy every few seconds, only while it is on screen (the timer
// stops when the sidebar closes and this element unmounts). Raw HTML is off.
import { useEffect, useState } from "react";
import { Markdown } from "@/components/markdown";

export default function ServerPanel() {
  const [table, setTable] = useState(props.markdown);
  useEffect(() => {
    let shown = true;
    const refresh = async () => {
      try {
        const answer = await callAction({ name: props.action, payload: {} });
        if (shown && answer && typeof answer.response === "string") setTable(answer.response);
      } catch (error) {
        // Keep the last table; the next tick tries again.
      }
    };
    const timer = setInterval(refresh, props.refresh_ms);
    return () => {
      shown = false;
      clearInterval(timer);
    };
  }, []);
  return (
    <div className="text-sm">
      <Markdown allowHtml={false} renderMarkdown={true}>{table}</Markdown>
      <p className="text-muted-foreground mt-2">{props.note}</p>
    </div>
  );
}
