// POST a file with Node's built-in fetch and save the reply (tests/matrix/clients.py).
//   node fetch.mjs URL SRC DST STALL_SECONDS [NAME=VALUE ...]
// The body streams from the file (chunked; fetch needs `duplex: "half"` for a stream body, and
// still reads the reply while it sends). Prints {"status", "headers"} once the reply starts.
// Exit 3: the reply's body was cut off; 4: nothing moved for STALL_SECONDS; 1: anything else.
import { createReadStream, createWriteStream } from "node:fs";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";

const [url, src, dst, stall, ...pairs] = process.argv.slice(2);
const headers = Object.fromEntries(pairs.map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]));
const controller = new AbortController();
let moved = Date.now();
const watchdog = setInterval(() => {
  if (Date.now() - moved > Number(stall) * 1000) {
    controller.abort(new Error(`nothing moved for ${stall} s`));
  }
}, 200);
const progress = () =>
  new Transform({
    transform(chunk, _, done) {
      moved = Date.now();
      done(null, chunk);
    },
  });

let started = false;
try {
  const body = Readable.toWeb(createReadStream(src).pipe(progress()));
  const init = { method: "POST", headers, body, duplex: "half", signal: controller.signal };
  const response = await fetch(url, init);
  started = true;
  const head = { status: response.status, headers: Object.fromEntries(response.headers) };
  process.stdout.write(JSON.stringify(head) + "\n");
  await pipeline(Readable.fromWeb(response.body), progress(), createWriteStream(dst));
} catch (error) {
  process.stderr.write(`${error.name}: ${error.message} (${error.cause ?? "no cause"})\n`);
  process.exitCode = controller.signal.aborted ? 4 : started ? 3 : 1;
} finally {
  clearInterval(watchdog);
}
