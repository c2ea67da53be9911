// BullMQ on Node: the same roles as the Python adapters (see _common.py), in one script.
//
// Runs with NODE_PATH pointing at benchmarks/.peers/bullmq-node/node_modules (npm installs
// bullmq and ioredis there at run time; nothing of theirs is committed). Worker:
// `new Worker("bench", processor, {connection, concurrency})` as BullMQ's docs show (it has
// no worker CLI); completed jobs kept (its default). Done when: the job id is in
// `bull:bench:completed`. Latency: `job.waitUntilFinished(queueEvents)`, the documented way.
// `--sleep S` (worker): each job first awaits a setTimeout promise of S seconds (the
// I/O-bound drain). The drain prints `{"first": n}` and `{"last": n}` at the polls that
// open and close its window, as _common.py does.
"use strict";

const { Queue, QueueEvents, Worker } = require("bullmq");
const IORedis = require("ioredis");

const NAME = "bench";
const PAYLOAD = "x".repeat(100);
const BATCH = 100; // jobs in flight while producing (as the async Python clients)
const BULK = 1000; // addBulk chunk

function parse(argv) {
  const args = {
    role: argv[0],
    url: process.env.BENCH_URL || "redis://127.0.0.1:6379/0",
    jobs: 10000,
    concurrency: 100,
    warmup: 200,
    timeout: 600,
    latencySeconds: 20,
    poll: 0.005,
    sleep: 0,
  };
  const names = {
    "--url": "url",
    "--jobs": "jobs",
    "--concurrency": "concurrency",
    "--warmup": "warmup",
    "--timeout": "timeout",
    "--latency-seconds": "latencySeconds",
    "--poll": "poll",
    "--sleep": "sleep",
  };
  for (let i = 1; i < argv.length; i += 2) {
    const key = names[argv[i]];
    if (!key) throw new Error(`unknown option ${argv[i]}`);
    args[key] = key === "url" ? argv[i + 1] : Number(argv[i + 1]);
  }
  return args;
}

function connection(url) {
  const u = new URL(url);
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  return { host: u.hostname, port: Number(u.port || 6379), db, maxRetriesPerRequest: null };
}

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const now = () => Number(process.hrtime.bigint()) / 1e9;

async function worker(args) {
  const pause = args.sleep * 1000;
  const processor =
    pause > 0
      ? async () => {
          await new Promise((resolve) => setTimeout(resolve, pause));
          return "ok";
        }
      : async () => "ok";
  const w = new Worker(NAME, processor, {
    connection: connection(args.url),
    concurrency: args.concurrency,
  });
  w.on("error", (err) => console.error("worker error", err));
  const stop = async () => {
    await Promise.race([w.close(), sleep(5)]);
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

class Client {
  constructor(args) {
    this.args = args;
    this.queue = new Queue(NAME, { connection: connection(args.url) });
    this.redis = new IORedis(connection(args.url));
    this.events = null;
  }

  async enqueueOne() {
    return (await this.queue.add("noop", { payload: PAYLOAD })).id;
  }

  async enqueueBatch(k) {
    const adds = [];
    for (let i = 0; i < k; i++) adds.push(this.enqueueOne());
    return Promise.all(adds);
  }

  async enqueueBulk(k) {
    const jobs = [];
    for (let i = 0; i < k; i++) jobs.push({ name: "noop", data: { payload: PAYLOAD } });
    return (await this.queue.addBulk(jobs)).map((j) => j.id);
  }

  // how many of ids are in the completed set (the "done when" rule of every adapter)
  async done(ids) {
    let n = 0;
    for (let i = 0; i < ids.length; i += 5000) {
      const scores = await this.redis.zmscore(`bull:${NAME}:completed`, ...ids.slice(i, i + 5000));
      n += scores.filter((s) => s !== null).length;
    }
    return n;
  }

  // drain: only the prefilled jobs are on this fresh queue, so the set's size counts them
  async countDone(ids) {
    return Math.min(ids.length, await this.redis.zcard(`bull:${NAME}:completed`));
  }

  async roundtrip() {
    if (this.events === null) {
      this.events = new QueueEvents(NAME, { connection: connection(this.args.url) });
      await this.events.waitUntilReady();
    }
    const job = await this.queue.add("noop", { payload: PAYLOAD });
    await job.waitUntilFinished(this.events, 30000);
  }

  async close() {
    const closing = [this.queue.close(), this.redis.quit()];
    if (this.events !== null) closing.push(this.events.close());
    await Promise.race([Promise.all(closing), sleep(2)]);
  }
}

async function enqueue(client, n, bulk) {
  let ids = [];
  while (ids.length < n) {
    const k = Math.min(bulk ? BULK : BATCH, n - ids.length);
    ids = ids.concat(await (bulk ? client.enqueueBulk(k) : client.enqueueBatch(k)));
  }
  return ids;
}

// how many of ids are done, reading `count` over windows of 1,000 ids from the oldest (jobs
// finish roughly in order, so each poll reads one window, not every id): exact at the end
function progress(count, ids) {
  let k = 0;
  return async () => {
    while (k < ids.length) {
      const w = ids.slice(k, k + 1000);
      const c = await count(w);
      if (c < w.length) return k + c;
      k += w.length;
    }
    return ids.length;
  };
}

async function waitDone(client, ids, args, count) {
  const deadline = now() + args.timeout;
  const seen = progress(count, ids);
  for (;;) {
    const c = await seen();
    if (c >= ids.length) return;
    if (now() > deadline) throw new Error(`only ${c} of ${ids.length} jobs done`);
    await sleep(args.poll);
  }
}

async function drive(args) {
  const client = new Client(args);
  const done = (ids) => client.done(ids);
  try {
    if (args.role === "enqueue") {
      const t0 = now();
      for (let i = 0; i < args.jobs; i++) await client.enqueueOne();
      return { enqueue_per_s: args.jobs / (now() - t0) };
    }
    if (args.role === "bulk") {
      const t0 = now();
      await enqueue(client, args.jobs, true);
      return { bulk_per_s: args.jobs / (now() - t0) };
    }
    if (args.role === "drain") {
      const t0 = now();
      const ids = await enqueue(client, args.jobs, true);
      const prefill = now() - t0;
      process.stdout.write(JSON.stringify({ prefilled: ids.length, prefill_s: prefill }) + "\n");
      const deadline = now() + args.timeout;
      let first = null;
      let firstCount = 0;
      for (;;) {
        const c = await client.countDone(ids);
        const t = now();
        if (first === null && c > 0) {
          [first, firstCount] = [t, c];
          process.stdout.write(JSON.stringify({ first: c }) + "\n");
        }
        if (c >= ids.length) {
          process.stdout.write(JSON.stringify({ last: c }) + "\n");
          const span = t - first;
          return {
            drain_jobs: ids.length,
            prefill_s: prefill,
            drain_s: span,
            drain_per_s: span > 0 ? (ids.length - firstCount) / span : null,
          };
        }
        if (t > deadline) throw new Error(`only ${c} of ${ids.length} jobs done`);
        await sleep(args.poll);
      }
    }
    // warm-up: the worker is up, connected and has run jobs before the clock starts
    await waitDone(client, await enqueue(client, args.warmup, false), args, done);
    if (args.role === "produce") {
      const t0 = now();
      const ids = await enqueue(client, args.jobs, false);
      const t1 = now();
      await waitDone(client, ids, args, done);
      const t2 = now();
      return {
        jobs: args.jobs,
        enqueue_s: t1 - t0,
        total_s: t2 - t0,
        jobs_per_s: args.jobs / (t2 - t0),
      };
    }
    if (args.role === "latency") {
      const latencies = [];
      const stop = now() + args.latencySeconds;
      for (let i = 0; i < args.jobs; i++) {
        const t0 = now();
        await client.roundtrip();
        latencies.push(now() - t0);
        if (t0 > stop && latencies.length >= 20) break;
      }
      return { latencies_s: latencies };
    }
    throw new Error(`unknown role ${args.role}`);
  } finally {
    await client.close();
  }
}

async function main() {
  const args = parse(process.argv.slice(2));
  if (args.role === "worker") return worker(args);
  const out = await drive(args);
  process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
