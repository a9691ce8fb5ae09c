// stream follows one of the API's SSE streams (a run's events, a session
// stream): every event's id is its seq, so after a dropped connection it
// resumes after the last seq it delivered, and an event at or below that
// seq is never delivered twice. The browser's own reconnection sends
// Last-Event-ID; when it gives up (an HTTP error), stream reconnects with
// ?after= itself, backing off up to 10 s. It stops at the "end" event.

export function stream(url, types, { onEvent, onEnd, onState }) {
  let last = 0;
  let es = null;
  let stopped = false;
  let wait = 500;
  const open = () => {
    if (stopped) return;
    const sep = url.includes("?") ? "&" : "?";
    es = new EventSource(last > 0 ? `${url}${sep}after=${last}` : url, { withCredentials: true });
    es.onopen = () => { wait = 500; onState && onState("live"); };
    for (const t of types) {
      es.addEventListener(t, (m) => {
        const seq = Number(m.lastEventId);
        if (Number.isFinite(seq) && seq > 0) {
          if (seq <= last) return; // a repeat after a reconnect
          last = seq;
        }
        let data = null;
        try { data = JSON.parse(m.data); } catch { data = m.data; }
        onEvent(t, data, seq);
      });
    }
    es.addEventListener("end", () => { stop(); onEnd && onEnd(); });
    es.onerror = () => {
      if (stopped) return;
      if (es.readyState === EventSource.CLOSED) {
        onState && onState("retrying");
        setTimeout(open, wait);
        wait = Math.min(wait * 2, 10000);
      } else {
        onState && onState("reconnecting");
      }
    };
  };
  const stop = () => { stopped = true; if (es) es.close(); };
  open();
  return { stop, last: () => last };
}
