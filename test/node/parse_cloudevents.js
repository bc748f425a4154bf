// Parses what a receiver got with the CloudEvents SDK (npm `cloudevents`, HTTP.toEvent):
// binary, structured and batched requests alike.
//
// Input:  {"requests": [{"headers": {...}, "body": "..."}]}, headers as the test receiver
//         records them (names lower-cased; a repeated header's values in an array).
// Output: {"results": [{"ok": true, "events": [{id, type, source, time, specversion,
//         datacontenttype, data}]} | {"ok": false, "error": "..."}]}, one per request.
//
// The HTTP binding percent-encodes ce-* header values; SDK 10 hands them over as they
// came, so they are decoded here first, as the binding tells a receiver to.
const { HTTP } = require("cloudevents");

function headersOf(recorded) {
  const headers = {};
  for (const [name, value] of Object.entries(recorded || {})) {
    let v = Array.isArray(value) ? value.join(", ") : String(value);
    if (name.toLowerCase().startsWith("ce-")) v = decodeURIComponent(v);
    headers[name] = v;
  }
  return headers;
}

function plain(event) {
  return {
    id: event.id,
    type: event.type,
    source: event.source,
    time: event.time,
    specversion: event.specversion,
    datacontenttype: event.datacontenttype,
    data: event.data,
  };
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { requests } = JSON.parse(input);
  const results = requests.map((r) => {
    try {
      const parsed = HTTP.toEvent({ headers: headersOf(r.headers), body: r.body });
      const events = Array.isArray(parsed) ? parsed : [parsed];
      for (const e of events) e.validate();
      return { ok: true, batch: Array.isArray(parsed), events: events.map(plain) };
    } catch (e) {
      return { ok: false, error: String((e && e.message) || e) + (e && e.errors ? " " + JSON.stringify(e.errors) : "") };
    }
  });
  process.stdout.write(JSON.stringify({ results }));
});
