// Verifies Standard Webhooks messages published by hookledger with verifiers
// installed from the npm registry, so that our Go signer is never checked
// against itself.
//
//   node verify.mjs CASES.json   one JSON line per case; exit 0 iff every case
//                                got its expected verdict, 1 otherwise
//   node verify.mjs --self-test  builds its own cases with node:crypto and
//                                checks that the verifiers and this harness
//                                agree with them
//
// Exit 2 is a usage error: no argument, unreadable file, or a case that does
// not follow the contract in README.md.
//
// v1 (HMAC-SHA256, whsec_) is verified by `standardwebhooks`, the official
// JavaScript library of the Standard Webhooks project, through its own
// Webhook.verify: header parsing, timestamp tolerance, secret decoding,
// signature matching are all the library's.
//
// v1a (ed25519, whpk_) is verified by NO published Standard Webhooks
// library: neither `standardwebhooks` nor `svix` (which wraps it) knows v1a.
// The ed25519 check itself is `@noble/ed25519` (RFC 8032, strict mode); the
// Standard Webhooks framing around it (header split, whpk_ decoding, the
// `{id}.{timestamp}.{body}` content, the 5-minute tolerance) is written here,
// following the spec and mirroring standardwebhooks' v1 code path. See
// README.md: v1a results are evidence, not a reference-library verdict.

import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import * as ed from "@noble/ed25519";
import { Webhook } from "standardwebhooks";

const require = createRequire(import.meta.url);
const SW_VERSION = require("standardwebhooks/package.json").version;
const NOBLE_VERSION = require("@noble/ed25519/package.json").version;

// Same window as standardwebhooks' WEBHOOK_TOLERANCE_IN_SECONDS, so a message
// is judged fresh or stale alike under v1 and v1a.
const TOLERANCE_SECONDS = 5 * 60;

class UsageError extends Error {}

// --- verification ---------------------------------------------------------

function verifyV1(c) {
	// jsonParse: false because the body is any raw string; the library would
	// otherwise JSON.parse it after a successful match and throw on non-JSON.
	new Webhook(c.secret).verify(c.body, c.headers, { jsonParse: false });
}

// Strict base64 (standard alphabet, padded), as the spec serialises keys and
// signatures; Buffer.from(s, "base64") alone would skip junk characters.
function decodeBase64Strict(s, what) {
	if (
		typeof s !== "string" ||
		s.length === 0 ||
		s.length % 4 !== 0 ||
		!/^[A-Za-z0-9+/]*={0,2}$/.test(s)
	) {
		throw new Error(`${what} is not base64`);
	}
	return new Uint8Array(Buffer.from(s, "base64"));
}

async function verifyV1a(c) {
	const headers = {};
	for (const [k, v] of Object.entries(c.headers)) headers[k.toLowerCase()] = v;
	const msgId = headers["webhook-id"];
	const msgSignature = headers["webhook-signature"];
	const msgTimestamp = headers["webhook-timestamp"];
	if (!msgSignature || !msgId || !msgTimestamp) {
		throw new Error("Missing required headers");
	}
	const timestamp = Number.parseInt(msgTimestamp, 10);
	if (Number.isNaN(timestamp)) throw new Error("Invalid Signature Headers");
	const now = Math.floor(Date.now() / 1000);
	if (now - timestamp > TOLERANCE_SECONDS) {
		throw new Error("Message timestamp too old");
	}
	if (timestamp > now + TOLERANCE_SECONDS) {
		throw new Error("Message timestamp too new");
	}

	if (!c.public_key.startsWith("whpk_")) {
		throw new Error("public key lacks the whpk_ prefix");
	}
	const publicKey = decodeBase64Strict(c.public_key.slice(5), "public key");
	if (publicKey.length !== 32) {
		throw new Error(`public key is ${publicKey.length} bytes, want 32`);
	}

	const content = new TextEncoder().encode(`${msgId}.${timestamp}.${c.body}`);
	for (const entry of String(msgSignature).split(" ")) {
		const comma = entry.indexOf(",");
		if (comma < 0 || entry.slice(0, comma) !== "v1a") continue;
		let sig;
		try {
			sig = decodeBase64Strict(entry.slice(comma + 1), "signature");
		} catch {
			continue;
		}
		if (sig.length !== 64) continue;
		if (await ed.verifyAsync(sig, content, publicKey, { zip215: false })) {
			return;
		}
	}
	throw new Error("No matching signature found");
}

async function runCase(c) {
	// Every key the case names must verify for the message to count as valid.
	const failures = [];
	if (c.secret != null) {
		try {
			verifyV1(c);
		} catch (e) {
			failures.push(`v1 (standardwebhooks ${SW_VERSION}): ${e.message}`);
		}
	}
	if (c.public_key != null) {
		try {
			await verifyV1a(c);
		} catch (e) {
			failures.push(`v1a (@noble/ed25519 ${NOBLE_VERSION}): ${e.message}`);
		}
	}
	const outcome = failures.length === 0 ? "valid" : "invalid";
	if (outcome === c.expect) {
		return { name: c.name, ok: true, error: failures.join("; ") };
	}
	return {
		name: c.name,
		ok: false,
		error:
			outcome === "valid"
				? "expected invalid, but every signature check passed"
				: `expected valid: ${failures.join("; ")}`,
	};
}

function checkCases(doc) {
	if (doc === null || typeof doc !== "object" || !Array.isArray(doc.cases)) {
		throw new UsageError('input must be an object with a "cases" array');
	}
	if (doc.cases.length === 0) throw new UsageError("no cases");
	const seen = new Set();
	doc.cases.forEach((c, i) => {
		const where = `case ${i}`;
		if (c === null || typeof c !== "object") {
			throw new UsageError(`${where}: not an object`);
		}
		if (typeof c.name !== "string" || c.name === "") {
			throw new UsageError(`${where}: name must be a non-empty string`);
		}
		if (seen.has(c.name)) {
			throw new UsageError(`${where}: duplicate name ${JSON.stringify(c.name)}`);
		}
		seen.add(c.name);
		if (c.headers === null || typeof c.headers !== "object") {
			throw new UsageError(`${where} (${c.name}): headers must be an object`);
		}
		for (const [k, v] of Object.entries(c.headers)) {
			if (typeof v !== "string") {
				throw new UsageError(`${where} (${c.name}): header ${k} must be a string`);
			}
		}
		if (typeof c.body !== "string") {
			throw new UsageError(`${where} (${c.name}): body must be a string`);
		}
		for (const k of ["secret", "public_key"]) {
			if (c[k] != null && typeof c[k] !== "string") {
				throw new UsageError(`${where} (${c.name}): ${k} must be a string or null`);
			}
		}
		if (c.secret == null && c.public_key == null) {
			throw new UsageError(`${where} (${c.name}): needs a secret or a public_key`);
		}
		if (c.expect !== "valid" && c.expect !== "invalid") {
			throw new UsageError(`${where} (${c.name}): expect must be "valid" or "invalid"`);
		}
	});
	return doc.cases;
}

async function runFile(file) {
	let doc;
	try {
		doc = JSON.parse(readFileSync(file, "utf8"));
	} catch (e) {
		throw new UsageError(`reading ${file}: ${e.message}`);
	}
	const cases = checkCases(doc);
	let allOk = true;
	for (const c of cases) {
		const r = await runCase(c);
		process.stdout.write(`${JSON.stringify(r)}\n`);
		if (!r.ok) allOk = false;
	}
	return allOk ? 0 : 1;
}

// --- self-test ------------------------------------------------------------
//
// Signs with node:crypto, independently of both verifiers, exactly as the
// spec describes, and checks three things: each case gets its expected
// verdict; the same cases with the expectation flipped all fail (so the
// harness can report a mismatch); the CLI's exit codes follow the contract.

function hmacSig(secretBytes, id, ts, body) {
	return crypto
		.createHmac("sha256", secretBytes)
		.update(`${id}.${ts}.${body}`)
		.digest("base64");
}

function ed25519Pair() {
	const { publicKey, privateKey } = crypto.generateKeyPairSync("ed25519");
	const raw = Buffer.from(publicKey.export({ format: "jwk" }).x, "base64url");
	return { privateKey, whpk: `whpk_${raw.toString("base64")}` };
}

function edSig(privateKey, id, ts, body) {
	return crypto
		.sign(null, Buffer.from(`${id}.${ts}.${body}`), privateKey)
		.toString("base64");
}

function selfTestCases() {
	const now = Math.floor(Date.now() / 1000);
	const ts = String(now);
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
	const body = '{"type":"invoice.paid","data":{"id":"inv_1","amount":1200}}';
	const secret = crypto.randomBytes(32);
	const oldSecret = crypto.randomBytes(32);
	const whsec = `whsec_${secret.toString("base64")}`;
	const otherWhsec = `whsec_${crypto.randomBytes(32).toString("base64")}`;
	const key = ed25519Pair();
	const otherKey = ed25519Pair();
	const h = (sig, overrides = {}) => ({
		"webhook-id": id,
		"webhook-timestamp": ts,
		"webhook-signature": sig,
		...overrides,
	});
	const v1 = `v1,${hmacSig(secret, id, ts, body)}`;
	const v1old = `v1,${hmacSig(oldSecret, id, ts, body)}`;
	const v1a = `v1a,${edSig(key.privateKey, id, ts, body)}`;
	const stale = String(now - 600);
	const plain = "not json: a raw body";

	const cases = [
		{ name: "v1 valid", headers: h(v1), body, secret: whsec, expect: "valid" },
		{ name: "v1 tampered body", headers: h(v1), body: body.replace("1200", "1201"), secret: whsec, expect: "invalid" },
		{ name: "v1 wrong secret", headers: h(v1), body, secret: otherWhsec, expect: "invalid" },
		{ name: "v1 tampered id", headers: h(v1, { "webhook-id": `${id}x` }), body, secret: whsec, expect: "invalid" },
		{ name: "v1 tampered timestamp", headers: h(v1, { "webhook-timestamp": String(now - 1) }), body, secret: whsec, expect: "invalid" },
		{
			name: "v1 stale timestamp",
			headers: h(`v1,${hmacSig(secret, id, stale, body)}`, { "webhook-timestamp": stale }),
			body,
			secret: whsec,
			expect: "invalid",
		},
		{ name: "v1 rotation: only the second signature valid", headers: h(`${v1old} ${v1}`), body, secret: whsec, expect: "valid" },
		{ name: "v1 rotation: only the first signature valid", headers: h(`${v1} ${v1old}`), body, secret: whsec, expect: "valid" },
		{ name: "v1 rotation: neither signature valid", headers: h(v1old), body, secret: otherWhsec, expect: "invalid" },
		{
			name: "v1 raw non-JSON body",
			headers: h(`v1,${hmacSig(secret, id, ts, plain)}`),
			body: plain,
			secret: whsec,
			expect: "valid",
		},
		{ name: "v1 header with only v1a", headers: h(v1a), body, secret: whsec, expect: "invalid" },
		{ name: "v1a valid", headers: h(v1a), body, public_key: key.whpk, expect: "valid" },
		{ name: "v1a tampered body", headers: h(v1a), body: body.replace("1200", "1201"), public_key: key.whpk, expect: "invalid" },
		{ name: "v1a wrong public key", headers: h(v1a), body, public_key: otherKey.whpk, expect: "invalid" },
		{ name: "v1a tampered id", headers: h(v1a, { "webhook-id": `${id}x` }), body, public_key: key.whpk, expect: "invalid" },
		{
			name: "v1a stale timestamp",
			headers: h(`v1a,${edSig(key.privateKey, id, stale, body)}`, { "webhook-timestamp": stale }),
			body,
			public_key: key.whpk,
			expect: "invalid",
		},
		{
			name: "v1a: only the second signature valid",
			headers: h(`v1a,${edSig(otherKey.privateKey, id, ts, body)} ${v1a}`),
			body,
			public_key: key.whpk,
			expect: "valid",
		},
		{ name: "v1a header with only v1", headers: h(v1), body, public_key: key.whpk, expect: "invalid" },
		{ name: "v1a signature labelled v1", headers: h(v1a.replace(/^v1a,/, "v1,")), body, public_key: key.whpk, expect: "invalid" },
		{
			name: "v1 and v1a in one header, both keys",
			headers: h(`${v1old} ${v1} ${v1a}`),
			body,
			secret: whsec,
			public_key: key.whpk,
			expect: "valid",
		},
		{
			name: "v1 and v1a in one header, v1a key wrong",
			headers: h(`${v1} ${v1a}`),
			body,
			secret: whsec,
			public_key: otherKey.whpk,
			expect: "invalid",
		},
	];
	return cases.map((c) => ({ secret: null, public_key: null, ...c }));
}

async function selfTest() {
	const problems = [];
	const cases = selfTestCases();

	for (const c of cases) {
		const r = await runCase(c);
		process.stdout.write(`${JSON.stringify(r)}\n`);
		if (!r.ok) problems.push(`${c.name}: ${r.error}`);
	}
	for (const c of cases) {
		const flipped = { ...c, expect: c.expect === "valid" ? "invalid" : "valid" };
		const r = await runCase(flipped);
		if (r.ok) problems.push(`${c.name}: the flipped expectation was not reported`);
	}

	const script = fileURLToPath(import.meta.url);
	const dir = mkdtempSync(path.join(os.tmpdir(), "publish-verify-"));
	try {
		const run = (args) =>
			spawnSync(process.execPath, [script, ...args], { encoding: "utf8" });
		const good = path.join(dir, "good.json");
		const bad = path.join(dir, "bad.json");
		const malformed = path.join(dir, "malformed.json");
		writeFileSync(good, JSON.stringify({ cases }));
		writeFileSync(
			bad,
			JSON.stringify({ cases: [...cases.slice(1), { ...cases[0], expect: "invalid" }] }),
		);
		writeFileSync(malformed, JSON.stringify({ cases: [{ name: "x", headers: {}, body: "" }] }));

		const g = run([good]);
		const lines = g.stdout.trim().split("\n").map((l) => JSON.parse(l));
		if (g.status !== 0) problems.push(`cli: all-valid file exited ${g.status}: ${g.stderr}`);
		if (lines.length !== cases.length || !lines.every((l) => l.ok === true)) {
			problems.push(`cli: all-valid file printed ${lines.length} lines, want ${cases.length} with ok`);
		}
		const b = run([bad]);
		const last = JSON.parse(b.stdout.trim().split("\n").at(-1));
		if (b.status !== 1) problems.push(`cli: file with one mismatch exited ${b.status}, want 1`);
		if (last.name !== cases[0].name || last.ok !== false) {
			problems.push("cli: the mismatching case was not reported as ok:false");
		}
		for (const [label, args] of [
			["no argument", []],
			["missing file", [path.join(dir, "absent.json")]],
			["case without a key or expect", [malformed]],
		]) {
			const r = run(args);
			if (r.status !== 2) problems.push(`cli: ${label} exited ${r.status}, want 2`);
		}
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}

	const summary = `self-test: ${cases.length} cases (standardwebhooks ${SW_VERSION} for v1, @noble/ed25519 ${NOBLE_VERSION} for v1a), flipped expectations, CLI exit codes`;
	if (problems.length > 0) {
		process.stderr.write(`${summary}: FAILED\n${problems.map((p) => `  ${p}`).join("\n")}\n`);
		return 1;
	}
	process.stderr.write(`${summary}: ok\n`);
	return 0;
}

// --- main -----------------------------------------------------------------

async function main(argv) {
	if (argv.length !== 1 || argv[0] === "-h" || argv[0] === "--help") {
		throw new UsageError("usage: node verify.mjs CASES.json | --self-test");
	}
	if (argv[0] === "--self-test") return selfTest();
	return runFile(argv[0]);
}

main(process.argv.slice(2)).then(
	(code) => {
		process.exitCode = code;
	},
	(e) => {
		if (e instanceof UsageError) {
			process.stderr.write(`verify.mjs: ${e.message}\n`);
			process.exitCode = 2;
			return;
		}
		process.stderr.write(`verify.mjs: ${e.stack ?? e}\n`);
		process.exitCode = 1;
	},
);
