// An application worker written in another language: Node.js 20, fetch, no packages.
// Usage: node node_worker.mjs BASE_URL API_KEY JOBS   (works JOBS jobs, then shuts down)
const [base, apiKey, jobsArg] = process.argv.slice(2);
const want = Number(jobsArg);
const json = (h) => ({ "Content-Type": "application/json", ...h });

async function post(path, headers, body) {
  const r = await fetch(base + path, { method: "POST", headers: json(headers), body: JSON.stringify(body ?? {}) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

const handlers = {
  LoadInvoiceHandler: (job) => JSON.stringify({ loaded: JSON.parse(job.input || "{}").invoiceId }),
  EmailInvoiceHandler: (job) => `emailed ${JSON.parse(job.prevStageOutput).loaded}`,
  ArchiveInvoiceHandler: (job) => `archived ${JSON.parse(job.prevStageOutput).loaded}`,
};

const boot = await post("/workers/bootstrap", { "X-API-Key": apiKey },
  { workerName: "node-1", supportedHandlers: Object.keys(handlers), sdkVersion: "node-fetch" });
if (boot.status !== 200) throw new Error(`bootstrap: ${boot.status} ${JSON.stringify(boot.body)}`);
const session = { "X-Worker-Session": boot.body.workerSessionToken };
let done = 0;
while (done < want) {
  const pulled = await post("/jobs/pull", session, { waitSeconds: 5 });
  if (pulled.status === 204) continue;
  if (pulled.status !== 200) throw new Error(`pull: ${pulled.status}`);
  const job = pulled.body;
  const lease = await post(`/stages/${job.stageId}/lease/acquire`, session,
    { executionId: job.executionId, workerId: boot.body.workerId });
  if (!lease.body.acquired) continue;
  const output = handlers[job.stageHandlerName](job);
  let result;
  do {
    result = await post(`/stages/${job.stageId}/result`, session,
      { executionId: job.executionId, attempt: job.attempt, isSuccess: true, output });
  } while (result.status === 503);
  if (result.status !== 202) throw new Error(`result: ${result.status} ${JSON.stringify(result.body)}`);
  await post("/jobs/ack", session, { token: job.token });
  console.log(`${job.stageName} ${job.attempt} ${output}`);
  done += 1;
}
await post("/workers/shutdown", session, {});
