// Generates signature test vectors for internal/signature with the senders' own
// npm libraries, and checks the vectors our Go signers wrote (ours.json)
// with the same libraries. See README.md for how to run it.
//
//   node gen.mjs [--check-only] [--out DIR] [--hookledger BIN]
//
// DIR defaults to ../../internal/signature/testdata. With --hookledger, the
// headers that the built binary's `hookledger sign` prints for each kind
// are also checked with the library. The script exits non-zero when a
// library disagrees with an expected outcome.
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import '@shopify/shopify-api/adapters/node';
import { shopifyApi, ApiVersion, LogSeverity } from '@shopify/shopify-api';
import { createSHA256HMAC, HashFormat } from '@shopify/shopify-api/runtime';
import { sign as ghSign, verify as ghVerify } from '@octokit/webhooks-methods';
import { verifySlackRequest } from '@slack/bolt';
import twilio from 'twilio';
import { Paddle, Environment } from '@paddle/paddle-node-sdk';
import { WebhooksHelper } from 'square';
import { Webhook as SvixWebhook } from 'svix';
import mailgunJs from 'mailgun-js';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const checkOnly = args.includes('--check-only');
const outIdx = args.indexOf('--out');
const outDir = outIdx >= 0 ? args[outIdx + 1] : path.join(here, '../../internal/signature/testdata');
const binIdx = args.indexOf('--hookledger');
const hookledgerBin = binIdx >= 0 ? path.resolve(args[binIdx + 1]) : '';

function version(pkg) {
  // Read from the installed package, so provenance cannot drift from the lockfile.
  const p = path.join(here, 'node_modules', pkg, 'package.json');
  return JSON.parse(fs.readFileSync(p, 'utf8')).version;
}

// T0 is 2026-01-01T00:00:00Z, the fixed clock of the Go tests.
const T0 = 1767225600;

// withNow runs fn with Date.now() and new Date() pinned to unix seconds s,
// for libraries that read the clock themselves (svix, paddle).
async function withNow(s, fn) {
  const RealDate = globalThis.Date;
  const ms = s * 1000;
  class FixedDate extends RealDate {
    constructor(...a) { if (a.length === 0) { super(ms); } else { super(...a); } }
    static now() { return ms; }
  }
  globalThis.Date = FixedDate;
  try { return await fn(); } finally { globalThis.Date = RealDate; }
}

const hmac = (alg, key, data, enc) => crypto.createHmac(alg, key).update(data, 'utf8').digest(enc);
let failures = 0;
function expect(kind, name, want, got) {
  if (want !== got) {
    failures++;
    console.error(`FAIL ${kind}: ${name}: library says ${got}, expected ${want}`);
  }
}

// ---- library verifiers: (vector) -> Promise<boolean> ----------------------

const verifiers = {
  async github(v) {
    const sig = v.headers['X-Hub-Signature-256'];
    if (!sig) { return false; }
    return ghVerify(v.secret, v.body, sig);
  },
  async shopify(v) {
    const api = shopifyApi({
      apiKey: 'test-key', apiSecretKey: v.secret, scopes: [], hostName: 'app.example.com',
      apiVersion: ApiVersion.October25 ?? Object.values(ApiVersion).at(-2), isEmbeddedApp: false,
      logger: { level: LogSeverity.Error, log: () => {} },
    });
    const rawRequest = { method: 'POST', url: '/hooks/shop', headers: lower(v.headers) };
    const res = await api.webhooks.validate({ rawBody: v.body, rawRequest, rawResponse: {} });
    return res.valid === true;
  },
  async slack(v) {
    try {
      verifySlackRequest({
        signingSecret: v.secret, body: v.body, nowMilliseconds: v.now * 1000,
        headers: {
          'x-slack-signature': v.headers['X-Slack-Signature'],
          'x-slack-request-timestamp': Number(v.headers['X-Slack-Request-Timestamp']),
        },
      });
      return true;
    } catch { return false; }
  },
  async twilio(v) {
    const sig = v.headers['X-Twilio-Signature'] ?? '';
    if (new URL(v.url).searchParams.has('bodySHA256')) {
      return twilio.validateRequestWithBody(v.secret, sig, v.url, v.body);
    }
    return twilio.validateRequest(v.secret, sig, v.url, Object.fromEntries(formParams(v.body)));
  },
  async paddle(v) {
    const paddle = new Paddle('pdl_sdbx_apikey_test', { environment: Environment.sandbox });
    return withNow(v.now, () => paddle.webhooks.isSignatureValid(v.body, v.secret, v.headers['Paddle-Signature']))
      .catch(() => false);
  },
  async square(v) {
    return WebhooksHelper.verifySignature({
      requestBody: v.body, signatureHeader: v.headers['X-Square-Hmacsha256-Signature'] ?? '',
      signatureKey: v.secret, notificationUrl: v.url,
    });
  },
  // mailgun-js checks the body's signature object: its freshness window
  // (15 minutes) against the pinned clock, a token seen before as a
  // replay (so each check gets a new client), then the HMAC. It keys the
  // HMAC with what it calls apiKey: Mailgun's webhook signing key.
  async mailgun(v) {
    let sig;
    try { sig = JSON.parse(v.body).signature; } catch { return false; }
    if (!sig) { return false; }
    const mg = mailgunJs({ apiKey: v.secret, domain: 'sample.mailgun.com', mute: true });
    return withNow(v.now, () => mg.validateWebhook(sig.timestamp, sig.token, sig.signature));
  },
  async svix(v) {
    try {
      await withNow(v.now, () => new SvixWebhook(v.secret).verify(v.body, lower(v.headers)));
      return true;
    } catch { return false; }
  },
};

function lower(h) { return Object.fromEntries(Object.entries(h).map(([k, val]) => [k.toLowerCase(), val])); }

// formParams groups a form body the way express.urlencoded hands it to
// twilio's validateRequest: repeated names become arrays.
function formParams(body) {
  const m = new Map();
  for (const [k, val] of new URLSearchParams(body)) {
    if (!m.has(k)) { m.set(k, val); } else { m.set(k, [].concat(m.get(k), val)); }
  }
  return m;
}

// ---- hookledger sign ------------------------------------------------------

// signCases are the bodies `hookledger sign` signs per kind, with the URL
// the sender signs (Twilio, Square: the source's public_url).
const PUBLIC = 'https://hooks.example.com/hooks/';
const signCases = [
  { kind: 'github', source: 'github', body: () => ghBody },
  // Shopify's validate also requires the headers sign leaves to the caller
  // (the topic and the delivery's other metadata).
  { kind: 'shopify', source: 'shopify', body: () => shopBody, extra: { 'X-Shopify-Topic': 'orders/create', 'X-Shopify-API-Version': '2025-10', 'X-Shopify-Shop-Domain': 'example.myshopify.com', 'X-Shopify-Webhook-Id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043' } },
  { kind: 'slack', source: 'slack', body: () => slackEvent },
  { kind: 'twilio', source: 'twilio', body: () => twilioForm, url: PUBLIC + 'twilio' },
  { kind: 'twilio', source: 'twilio', body: () => twilioJSON, url: PUBLIC + 'twilio', json: true },
  { kind: 'paddle', source: 'paddle', body: () => paddleBody },
  { kind: 'square', source: 'square', body: () => squareBody, url: PUBLIC + 'square' },
  { kind: 'svix', source: 'svix', body: () => svixBody, flags: ['--headers', 'svix'] },
];

// checkSignVerb runs `BIN sign` for every case in a temporary config and
// checks the printed headers with the library, at the current time (sign
// signs now). A changed body must then fail.
async function checkSignVerb(bin) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hookledger-sign-'));
  const kindOf = { svix: 'standard-webhooks' };
  const src = Object.keys(S).map((k) => `  - name: ${k}\n    kind: ${kindOf[k] ?? k}\n    secrets: [${JSON.stringify(S[k])}]\n` +
    (k === 'twilio' || k === 'square' ? `    public_url: ${PUBLIC}${k}\n` : '')).join('');
  const cfg = path.join(dir, 'hookledger.yaml');
  fs.writeFileSync(cfg, `listen: 127.0.0.1:8080\nstore: sqlite:${path.join(dir, 'unused.db')}\nsources:\n${src}`);
  try {
    for (const c of signCases) {
      const body = c.body();
      const bodyFile = path.join(dir, 'body');
      fs.writeFileSync(bodyFile, body);
      const res = spawnSync(bin, ['sign', '--config', cfg, '--source', c.source, '--event-id', 'msg_2Lx6cFNUVZo9Y3YqLIiLqRQqCZs', ...(c.flags ?? []), bodyFile], { encoding: 'utf8' });
      if (res.status !== 0) {
        failures++;
        console.error(`FAIL ${c.kind}: hookledger sign --source ${c.source} exited ${res.status}: ${res.stderr}`);
        continue;
      }
      const headers = { ...(c.extra ?? {}) };
      for (const line of res.stdout.trim().split('\n')) {
        const i = line.indexOf(': ');
        headers[line.slice(0, i)] = line.slice(i + 2);
      }
      let url = c.url;
      if (c.json) {
        // sign reports the URL with bodySHA256 it signed on stderr; it
        // must be the one Twilio would call for this body.
        url = c.url + '?bodySHA256=' + crypto.createHash('sha256').update(body).digest('hex');
        expect(c.kind, 'hookledger sign reports ' + url, true, res.stderr.includes(`signed for ${url};`));
      }
      const v = { body, headers, secret: S[c.kind], url, now: Math.floor(Date.now() / 1000) };
      const name = `hookledger sign ${c.source}${c.json ? ' (json)' : ''}`;
      expect(c.kind, name, true, await verifiers[c.kind](v));
      expect(c.kind, name + ' with the body changed', false, await verifiers[c.kind]({ ...v, body: body.replace(/[0-9]/, (d) => (d === '1' ? '2' : '1')) }));
    }
    console.error(`hookledger sign: ${signCases.length} outputs checked with the libraries`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- bodies ---------------------------------------------------------------

const ghBody = JSON.stringify({ action: 'opened', number: 42, pull_request: { id: 279147437, number: 42, title: 'Fix the flux capacitor', user: { login: 'octocat' } }, repository: { id: 1296269, full_name: 'octocat/Hello-World' }, installation: { id: 9876 } });
const ghPush = '{\n  "ref": "refs/heads/main",\n  "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",\n  "after": "0000000000000000000000000000000000000000",\n  "repository": {"id": 1296269, "full_name": "octocat/Hello-World"},\n  "pusher": {"name": "Mona Lisa Octocat ✨"}\n}\n';
const shopBody = JSON.stringify({ id: 820982911946154500, admin_graphql_api_id: 'gid://shopify/Order/820982911946154508', email: 'jon@example.com', created_at: '2025-12-31T19:00:00-05:00', total_price: '403.00', currency: 'USD', note: 'Grüße — 東京' });
const slackEvent = JSON.stringify({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', team_id: 'T061EG9R6', api_app_id: 'A0PNCHHK2', event: { type: 'message', channel: 'C2147483705', user: 'U2147483697', text: 'Hello world', ts: '1355517523.000005' }, type: 'event_callback', event_id: 'Ev0PV52K21', event_time: 1767225590 });
const slackChallenge = JSON.stringify({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P', type: 'url_verification' });
const slackCommand = 'token=gIkuvaNzQIHg97ATvDxqgjtO&team_id=T0001&team_domain=example&channel_id=C2147483705&channel_name=test&user_id=U2147483697&user_name=Steve&command=%2Fweather&text=94070&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1234%2F5678&trigger_id=13345224609.738474920.8088930838d88f008e0';
// Twilio's SIDs are two capital letters and 32 hex digits; these are test
// values of that shape.
const twAccount = 'AC3f1b5e7d9c2a4f6e8d0b1c3a5e7f9d2b';
const twMessage = 'SM1234567890abcdef1234567890abcdef';
const twCall = 'CA5d2e8f1a4b7c0d3e6f9a2b5c8d1e4f7a';
for (const sid of [twAccount, twMessage, twCall]) { if (!/^[A-Z]{2}[0-9a-f]{32}$/.test(sid)) { throw new Error(`${sid} is not of a SID's shape`); } }
const twilioForm = `AccountSid=${twAccount}&ApiVersion=2010-04-01&Body=Hello+%26+good+morning%21&From=%2B14158141829&MessageSid=${twMessage}&NumMedia=0&SmsStatus=received&To=%2B15558675310`;
const twilioRepeated = 'CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212&StatusCallbackEvent=participant-join&StatusCallbackEvent=participant-leave&StatusCallbackEvent=participant-join';
// A message status callback and a call status callback as Twilio sends
// them (the call's is the set of parameters of a real one, with test SIDs).
const twilioMessageStatus = `AccountSid=${twAccount}&ApiVersion=2010-04-01&From=%2B15558675310&MessageSid=${twMessage}&MessageStatus=delivered&SmsSid=${twMessage}&SmsStatus=delivered&To=%2B14158141829`;
const twilioCallStatus = `AccountSid=${twAccount}&AnsweredBy=human&ApiVersion=2010-04-01&CallDuration=49&CallSid=${twCall}&CallStatus=completed&CallbackSource=call-progress-events&Called=%2B15558675310&CalledCity=&CalledCountry=US&CalledState=CA&CalledZip=&Caller=%2B14158141829&CallerCity=SAN+FRANCISCO&CallerCountry=US&CallerState=CA&CallerZip=94103&Direction=outbound-api&Duration=1&From=%2B14158141829&FromCity=SAN+FRANCISCO&FromCountry=US&FromState=CA&FromZip=94103&SequenceNumber=3&SipResponseCode=200&Timestamp=Thu%2C+01+Jan+2026+00%3A00%3A00+%2B0000&To=%2B15558675310&ToCity=&ToCountry=US&ToState=CA&ToZip=`;
// twilioForged is a JSON body an attacker wants stored, and twilioBait the
// inbound SMS they text to the number first: its text carries the JSON's
// bodySHA256, so the SMS's signed string, read as a URL, is the URL of a
// JSON request with that body (see the vector below).
const twilioForged = JSON.stringify({ specversion: '1.0', type: 'com.twilio.messaging.message.delivered', source: '/forged', id: 'EZ99999999999999999999999999999999', time: '2026-01-01T00:00:00.000Z', data: { messageSid: 'SM99999999999999999999999999999999', messageStatus: 'delivered' } });
const twilioBait = `AccountSid=${twAccount}&ApiVersion=2010-04-01&Body=` + encodeURIComponent('x&bodySHA256=' + crypto.createHash('sha256').update(twilioForged, 'utf8').digest('hex') + '&z=') + `&From=%2B14158141829&MessageSid=${twMessage.replace('1234', '4321')}&NumMedia=0&SmsStatus=received&To=%2B15558675310`;
const twilioJSON = JSON.stringify({ specversion: '1.0', type: 'com.twilio.messaging.message.delivered', source: '/2010-04-01/Accounts/ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX/Messages/SM1234.json', id: 'EZ00000000000000000000000000000000', time: '2026-01-01T00:00:00.000Z', data: { messageSid: 'SM1234', messageStatus: 'delivered' } });
const paddleBody = JSON.stringify({ event_id: 'evt_01hv8x2acma2gz3he4mz9qh8q4', event_type: 'subscription.updated', occurred_at: '2026-01-01T00:00:00.000000Z', notification_id: 'ntf_01hv8x2af6vmb3h0ahr23y9k0j', data: { id: 'sub_01hv8x29kz0t586xy6zn1a62ny', status: 'active', customer_id: 'ctm_01hv8wt8nffez4p2t6typn4a5j' } });
const squareBody = JSON.stringify({ merchant_id: '6SSW7HV8K2ST5', type: 'payment.updated', event_id: '13b867cf-db3d-4b1c-90b6-2f32a9d78124', created_at: '2026-01-01T00:00:00.000Z', data: { type: 'payment', id: 'hYy9pRFVxpDsO1FB05SunFWUe9JZY', object: { payment: { id: 'hYy9pRFVxpDsO1FB05SunFWUe9JZY', status: 'COMPLETED', version: 11 } } } });
// Mailgun's webhook body: the signature object beside event-data, whose
// members follow Mailgun's webhook payload page (the ids are test values).
const mailgunEvent = (event, id, ts, extra) => ({
  event, id, timestamp: ts, 'log-level': event === 'failed' ? 'error' : 'info',
  account: { id: '1234567890303a4bd1f33898' }, domain: { name: 'sample.mailgun.com' },
  envelope: { sender: 'sender@sample.mailgun.com', targets: 'ada@example.com', transport: 'smtp' },
  message: { headers: { 'message-id': '20260101000000.000be97f99f8cea1@sample.mailgun.com', from: 'Sample Sender <sender@sample.mailgun.com>', to: 'ada@example.com', subject: 'Your receipt — №42 <ok>' }, size: 341 },
  recipient: 'ada@example.com', 'recipient-domain': 'example.com', tags: [], 'user-variables': {}, ...extra,
});
const mailgunDelivered = mailgunEvent('delivered', 'MXcc2gEpS-eN8HfkOnmK2w', 1767225595.658528, { 'delivery-status': { code: 250, message: 'OK' } });
const mailgunFailed = mailgunEvent('failed', 'CCXMjJ7nQi2N3BPigGOdgQ', 1767225590.372891, { severity: 'permanent', reason: 'bounce' });
const svixBody = JSON.stringify({ type: 'user.created', data: { id: 'user_29w83sxmDNGwOuEthce5gg56FcC', email_addresses: [{ email_address: 'example@example.org' }] }, object: 'event', timestamp: 1767225600000 });

// ---- signing --------------------------------------------------------------

const S = {
  github: 'It\'s a Secret to Everybody',
  shopify: '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',
  slack: '8f742231b10e8888abcd99yyyzzz85a5',
  twilio: '12345678901234567890123456789012',
  paddle: 'pdl_ntfset_01hv8x2amgyh3kkq5mzqqsb5yf_W3N3ZrBjW0d1QcQeLXvXJyC1b8GQ8aJx',
  square: 'asdf1234Sig-Key_ZXhhbXBsZQ',
  svix: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  mailgun: 'mailgun-test-signing-key-0f1e2d3c4b5a',
};
const WRONG = 'not-the-configured-secret-0000';

async function githubVectors() {
  const mk = async (name, body, secret, extra = {}) => {
    const sig = await ghSign(secret, body);
    return {
      name, body, now: T0,
      headers: {
        'X-GitHub-Event': 'pull_request', 'X-GitHub-Delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
        'X-GitHub-Hook-ID': '292430182', 'X-GitHub-Hook-Installation-Target-ID': '79929171',
        'X-GitHub-Hook-Installation-Target-Type': 'repository', 'User-Agent': 'GitHub-Hookshot/044aadd',
        'Content-Type': 'application/json',
        'X-Hub-Signature': 'sha1=' + hmac('sha1', secret, body, 'hex'),
        'X-Hub-Signature-256': sig, ...extra,
      },
    };
  };
  const ok1 = await mk('pull_request opened', ghBody, S.github);
  const ok2 = await mk('push with unicode and newlines', ghPush, S.github);
  const sha1Only = await mk('only the SHA-1 header (never accepted)', ghBody, S.github);
  delete sha1Only.headers['X-Hub-Signature-256'];
  return {
    signer: '@octokit/webhooks-methods sign', verifier: '@octokit/webhooks-methods verify',
    vectors: [
      { ...ok1, secret: S.github, valid: true },
      { ...ok2, secret: S.github, valid: true },
      { ...ok1, name: 'body changed', body: ghBody.replace('42', '43'), secret: S.github, valid: false, tamper: 'body' },
      { ...ok1, name: 'signature changed', headers: { ...ok1.headers, 'X-Hub-Signature-256': flipHex(ok1.headers['X-Hub-Signature-256']) }, secret: S.github, valid: false, tamper: 'signature' },
      { ...ok1, name: 'wrong secret', secret: WRONG, valid: false, tamper: 'secret' },
      { ...sha1Only, secret: S.github, valid: false, tamper: 'sha1-only' },
    ],
  };
}

async function shopifyVectors() {
  const sign = (body, secret) => createSHA256HMAC(secret, body, HashFormat.Base64);
  const hdr = async (body, secret, eventId, webhookId) => ({
    'X-Shopify-Topic': 'orders/create', 'X-Shopify-Hmac-Sha256': await sign(body, secret),
    'X-Shopify-Shop-Domain': 'example.myshopify.com', 'X-Shopify-API-Version': '2025-10',
    'X-Shopify-Webhook-Id': webhookId, 'X-Shopify-Event-Id': eventId,
    'X-Shopify-Triggered-At': '2026-01-01T00:00:00.000000000Z', 'Content-Type': 'application/json',
  });
  const ok = { name: 'orders/create', body: shopBody, now: T0, headers: await hdr(shopBody, S.shopify, '98880550-7158-44d4-b7cd-2c97c8a091b5', 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043') };
  // A retry: same event id, a new webhook id, same body and signature.
  const retry = { ...ok, name: 'orders/create retry (new webhook id, same event id)', headers: { ...ok.headers, 'X-Shopify-Webhook-Id': '4c9e1f47-9a2f-4a0e-8d5b-1b2a3c4d5e6f' } };
  return {
    signer: '@shopify/shopify-api runtime createSHA256HMAC (base64)', verifier: '@shopify/shopify-api webhooks.validate (node adapter)',
    vectors: [
      { ...ok, secret: S.shopify, valid: true },
      { ...retry, secret: S.shopify, valid: true },
      { ...ok, name: 'body changed', body: shopBody.replace('403.00', '0.01'), secret: S.shopify, valid: false, tamper: 'body' },
      { ...ok, name: 'signature changed', headers: { ...ok.headers, 'X-Shopify-Hmac-Sha256': flipB64(ok.headers['X-Shopify-Hmac-Sha256']) }, secret: S.shopify, valid: false, tamper: 'signature' },
      { ...ok, name: 'wrong secret', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function slackVectors() {
  const sig = (ts, body, secret) => 'v0=' + hmac('sha256', secret, `v0:${ts}:${body}`, 'hex');
  const mk = (name, body, ts, ctype, retry) => ({
    name, body, now: T0,
    headers: {
      'X-Slack-Request-Timestamp': String(ts), 'X-Slack-Signature': sig(ts, body, S.slack), 'Content-Type': ctype,
      ...(retry ? { 'X-Slack-Retry-Num': String(retry), 'X-Slack-Retry-Reason': 'http_timeout' } : {}),
    },
  });
  const ev = mk('event_callback', slackEvent, T0 - 10, 'application/json');
  const evRetry = mk('event_callback retry 1 (same event_id, new timestamp)', slackEvent, T0 - 2, 'application/json', 1);
  const ch = mk('url_verification challenge', slackChallenge, T0 - 1, 'application/json');
  const cmd = mk('slash command (form body)', slackCommand, T0 - 299, 'application/x-www-form-urlencoded');
  const stale = mk('timestamp 6 minutes old', slackEvent, T0 - 360, 'application/json');
  return {
    signer: 'node:crypto HMAC-SHA256 per Slack\'s documented v0 base string (@slack/bolt has no signer)', verifier: '@slack/bolt verifySlackRequest (nowMilliseconds)',
    vectors: [
      { ...ev, secret: S.slack, valid: true },
      { ...evRetry, secret: S.slack, valid: true },
      { ...ch, secret: S.slack, valid: true },
      { ...cmd, secret: S.slack, valid: true },
      { ...ev, name: 'body changed', body: slackEvent.replace('Hello', 'Jello'), secret: S.slack, valid: false, tamper: 'body' },
      { ...ev, name: 'signature changed', headers: { ...ev.headers, 'X-Slack-Signature': flipHex(ev.headers['X-Slack-Signature']) }, secret: S.slack, valid: false, tamper: 'signature' },
      { ...ev, name: 'timestamp header changed', headers: { ...ev.headers, 'X-Slack-Request-Timestamp': String(T0 - 9) }, secret: S.slack, valid: false, tamper: 'signature' },
      { ...stale, secret: S.slack, valid: false, tamper: 'timestamp' },
      { ...ev, name: 'wrong secret', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function twilioVectors() {
  const sign = (url, params, secret) => twilio.getExpectedTwilioSignature(secret, url, params);
  const base = 'https://hooks.example.com/hooks/twilio';
  const mkForm = (name, url, body) => ({
    name, url, body, now: T0,
    headers: { 'X-Twilio-Signature': sign(url, Object.fromEntries(formParams(body)), S.twilio), 'I-Twilio-Idempotency-Token': '6f3b1c2e-8a9d-4e7f-b0a1-2c3d4e5f6a7b', 'Content-Type': 'application/x-www-form-urlencoded; charset=UTF-8', 'User-Agent': 'TwilioProxy/1.1' },
  });
  const sms = mkForm('incoming SMS', base, twilioForm);
  const q = mkForm('URL with query string', base + '?tenant=acme&x=1', twilioForm);
  const rep = mkForm('repeated parameter names', base, twilioRepeated);
  // Twilio's back end sometimes signs the URL with the default port.
  const withPort = { ...sms, name: 'signed with :443, configured without', headers: { ...sms.headers, 'X-Twilio-Signature': sign('https://hooks.example.com:443/hooks/twilio', Object.fromEntries(formParams(twilioForm)), S.twilio) } };
  const jsonURL = base + '?bodySHA256=' + crypto.createHash('sha256').update(twilioJSON, 'utf8').digest('hex');
  const json = { name: 'JSON body with bodySHA256', url: jsonURL, body: twilioJSON, now: T0, headers: { 'X-Twilio-Signature': sign(jsonURL, null, S.twilio), 'I-Twilio-Idempotency-Token': '0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0', 'Content-Type': 'application/json' } };
  const msgStatus = mkForm('message status callback', base, twilioMessageStatus);
  const callStatus = mkForm('call status callback', base, twilioCallStatus);
  // Twilio signs the names and values with no separator, so moving the
  // boundary between a name and the next value keeps the signature:
  // Twilio's own validateRequest accepts each of these with the genuine
  // request's signature. hookledger refuses them (HTTP 400, see
  // docs/signatures.md); `malleated` names the genuine request.
  const malleate = (from, name, find, repl) => {
    if (!from.body.includes(find)) { throw new Error(`malleate ${name}: ${find} not in the body`); }
    return { ...from, name, body: from.body.replace(find, repl), malleated: from.name };
  };
  const malleated = [
    malleate(msgStatus, 'message status callback, SmsSid merged into MessageStatus', `&MessageStatus=delivered&SmsSid=${twMessage}&`, `&MessageStatus=deliveredSmsSid${twMessage}&`),
    malleate(callStatus, 'call status callback, SequenceNumber merged into a name', '&SequenceNumber=3&', '&SequenceNumber3=&'),
    malleate(callStatus, 'call status callback, SequenceNumber merged into FromZip', '&FromZip=94103&SequenceNumber=3&', '&FromZip=94103SequenceNumber3&'),
    malleate(callStatus, 'call status callback, SipResponseCode merged into SequenceNumber', '&SequenceNumber=3&SipResponseCode=200&', '&SequenceNumber=3SipResponseCode200&'),
    malleate(callStatus, 'call status callback, CallbackSource merged into CallStatus', '&CallStatus=completed&CallbackSource=call-progress-events&', '&CallStatus=completedCallbackSourcecall-progress-events&'),
  ];
  // The bait SMS's signed string (its URL, then its parameters) read as
  // the URL of a JSON request whose bodySHA256 is the forged body's: Twilio's
  // validateRequestWithBody accepts it with the SMS's signature. hookledger
  // refuses it (`refused`): the URL's query holds AccountSid, the first
  // parameter of every form Twilio signs, and bodySHA256 is not its last
  // parameter, where Twilio appends it.
  const baitURL = base + '?tenant=acme';
  const bait = mkForm('inbound SMS carrying a bodySHA256 in its text (URL with query)', baitURL, twilioBait);
  const signedString = baitURL + [...formParams(twilioBait).entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => k + v).join('');
  const forged = {
    name: 'JSON request forged from the inbound SMS\'s signature', url: signedString, body: twilioForged, now: T0,
    headers: { 'X-Twilio-Signature': bait.headers['X-Twilio-Signature'], 'Content-Type': 'application/json' },
    refused: 'the query holds AccountSid, and bodySHA256 is not its last parameter',
  };
  return {
    signer: 'twilio getExpectedTwilioSignature', verifier: 'twilio validateRequest / validateRequestWithBody',
    vectors: [
      { ...sms, secret: S.twilio, valid: true },
      { ...q, secret: S.twilio, valid: true },
      { ...rep, secret: S.twilio, valid: true },
      { ...withPort, secret: S.twilio, valid: true },
      { ...json, secret: S.twilio, valid: true },
      { ...msgStatus, secret: S.twilio, valid: true },
      { ...callStatus, secret: S.twilio, valid: true },
      ...malleated.map((v) => ({ ...v, secret: S.twilio, valid: true })),
      { ...bait, secret: S.twilio, valid: true },
      { ...forged, secret: S.twilio, valid: true },
      { ...sms, name: 'form parameter changed', body: twilioForm.replace('Hello', 'Jello'), secret: S.twilio, valid: false, tamper: 'body' },
      { ...sms, name: 'URL changed', url: base + '2', secret: S.twilio, valid: false, tamper: 'url' },
      { ...json, name: 'JSON body changed (bodySHA256 no longer matches)', body: twilioJSON.replace('delivered"', 'failed"'), secret: S.twilio, valid: false, tamper: 'body' },
      { ...sms, name: 'signature changed', headers: { ...sms.headers, 'X-Twilio-Signature': flipB64(sms.headers['X-Twilio-Signature']) }, secret: S.twilio, valid: false, tamper: 'signature' },
      { ...sms, name: 'wrong auth token', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function paddleVectors() {
  const h1 = (ts, body, secret) => hmac('sha256', secret, `${ts}:${body}`, 'hex');
  const mk = (name, ts, body, sigs) => ({ name, body, now: T0, headers: { 'Paddle-Signature': `ts=${ts};` + sigs.map((s) => 'h1=' + s).join(';'), 'Content-Type': 'application/json' } });
  const ok = mk('subscription.updated', T0 - 2, paddleBody, [h1(T0 - 2, paddleBody, S.paddle)]);
  // The SDK keeps only the last h1 of a header, so the rotation vector lists
  // the signature by the configured secret last.
  const rot = mk('two h1 values (secret rotation)', T0 - 1, paddleBody, [h1(T0 - 1, paddleBody, 'pdl_ntfset_old_secret_value_000000'), h1(T0 - 1, paddleBody, S.paddle)]);
  const stale = mk('timestamp 10 seconds old (SDK tolerance 5 s)', T0 - 10, paddleBody, [h1(T0 - 10, paddleBody, S.paddle)]);
  return {
    signer: 'node:crypto HMAC-SHA256 over "{ts}:{body}" per Paddle\'s documented algorithm (the SDK has no signer)', verifier: '@paddle/paddle-node-sdk webhooks.isSignatureValid (WebhooksValidator, clock pinned)',
    vectors: [
      { ...ok, secret: S.paddle, valid: true },
      { ...rot, secret: S.paddle, valid: true },
      { ...ok, name: 'body changed', body: paddleBody.replace('active', 'paused'), secret: S.paddle, valid: false, tamper: 'body' },
      { ...ok, name: 'signature changed', headers: { ...ok.headers, 'Paddle-Signature': flipHex(ok.headers['Paddle-Signature']) }, secret: S.paddle, valid: false, tamper: 'signature' },
      { ...ok, name: 'ts changed', headers: { ...ok.headers, 'Paddle-Signature': ok.headers['Paddle-Signature'].replace(`ts=${T0 - 2}`, `ts=${T0 - 1}`) }, secret: S.paddle, valid: false, tamper: 'signature' },
      { ...stale, secret: S.paddle, valid: false, tamper: 'timestamp' },
      { ...ok, name: 'wrong secret', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function squareVectors() {
  const url = 'https://hooks.example.com/hooks/square';
  const sig = (u, body, key) => hmac('sha256', key, u + body, 'base64');
  const ok = { name: 'payment.updated', url, body: squareBody, now: T0, headers: { 'X-Square-Hmacsha256-Signature': sig(url, squareBody, S.square), 'Square-Version': '2025-10-16', 'Content-Type': 'application/json' } };
  const q = { ...ok, name: 'notification URL with query', url: url + '?tenant=acme', headers: { ...ok.headers, 'X-Square-Hmacsha256-Signature': sig(url + '?tenant=acme', squareBody, S.square) } };
  return {
    signer: 'node:crypto HMAC-SHA256 over URL + body per Square\'s documented algorithm (the SDK has no signer)', verifier: 'square WebhooksHelper.verifySignature',
    vectors: [
      { ...ok, secret: S.square, valid: true },
      { ...q, secret: S.square, valid: true },
      { ...ok, name: 'body changed', body: squareBody.replace('COMPLETED', 'FAILED'), secret: S.square, valid: false, tamper: 'body' },
      { ...ok, name: 'URL changed (trailing slash)', url: url + '/', secret: S.square, valid: false, tamper: 'url' },
      { ...ok, name: 'signature changed', headers: { ...ok.headers, 'X-Square-Hmacsha256-Signature': flipB64(ok.headers['X-Square-Hmacsha256-Signature']) }, secret: S.square, valid: false, tamper: 'signature' },
      { ...ok, name: 'wrong signature key', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function mailgunVectors() {
  // Mailgun's documented construction, as its guide's Node snippet
  // computes it: hex HMAC-SHA256 over timestamp + token.
  const sign = (ts, token, key) => hmac('sha256', key, ts + token, 'hex');
  const mk = (name, ts, token, event) => ({
    name, now: T0, headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ signature: { token, timestamp: String(ts), signature: sign(String(ts), token, S.mailgun) }, 'event-data': event }),
  });
  const tok = 'e0b5477167110d68991efc6b9f89f0a11066af27834600e123';
  const ok = mk('delivered', T0 - 4, tok, mailgunDelivered);
  const failed = mk('failed (permanent)', T0 - 9, 'a4f1c2e3b5d6978812aa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d', mailgunFailed);
  const edit = (v, f) => { const b = JSON.parse(v.body); f(b); return JSON.stringify(b); };
  // event-data is not signed: the library, like hookledger, accepts a
  // signature object moved onto another event.
  const moved = { ...ok, name: 'event-data changed (not signed)', body: edit(ok, (b) => { b['event-data'] = { ...mailgunFailed, id: 'forged-event-id' }; }) };
  const stale = mk('timestamp 20 minutes old (library window 15 minutes)', T0 - 1200, '9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b', mailgunDelivered);
  return {
    signer: 'node:crypto HMAC-SHA256 over timestamp + token per Mailgun\'s securing-webhooks guide (no Mailgun library signs; mailgun.js has no webhook verification)', verifier: 'mailgun-js validateWebhook (clock pinned, a new client per vector)',
    vectors: [
      { ...ok, secret: S.mailgun, valid: true },
      { ...failed, secret: S.mailgun, valid: true },
      { ...moved, secret: S.mailgun, valid: true },
      { ...ok, name: 'token changed', body: edit(ok, (b) => { b.signature.token = tok.replace('e0b5', 'e0b6'); }), secret: S.mailgun, valid: false, tamper: 'signature' },
      { ...ok, name: 'timestamp changed', body: edit(ok, (b) => { b.signature.timestamp = String(T0 - 3); }), secret: S.mailgun, valid: false, tamper: 'signature' },
      { ...ok, name: 'signature changed', body: edit(ok, (b) => { b.signature.signature = flipHex(b.signature.signature); }), secret: S.mailgun, valid: false, tamper: 'signature' },
      { ...stale, secret: S.mailgun, valid: false, tamper: 'timestamp' },
      { ...ok, name: 'wrong signing key', secret: WRONG, valid: false, tamper: 'secret' },
    ],
  };
}

function svixVectors() {
  const wh = new SvixWebhook(S.svix);
  const mk = (name, id, ts, body) => ({ name, body, now: T0, headers: { 'svix-id': id, 'svix-timestamp': String(ts), 'svix-signature': wh.sign(id, new Date(ts * 1000), body), 'Content-Type': 'application/json' } });
  const ok = mk('user.created', 'msg_2Lq3bXm7Xq0n8s1a', T0 - 3, svixBody);
  const stale = mk('timestamp 6 minutes old', 'msg_2Lq3bXm7Xq0n8s1b', T0 - 360, svixBody);
  return {
    signer: 'svix Webhook.sign', verifier: 'svix Webhook.verify (clock pinned)',
    vectors: [
      { ...ok, secret: S.svix, valid: true },
      { ...ok, name: 'body changed', body: svixBody.replace('created', 'deleted'), secret: S.svix, valid: false, tamper: 'body' },
      { ...ok, name: 'svix-id changed', headers: { ...ok.headers, 'svix-id': 'msg_other' }, secret: S.svix, valid: false, tamper: 'signature' },
      { ...stale, secret: S.svix, valid: false, tamper: 'timestamp' },
      { ...ok, name: 'wrong secret', secret: 'whsec_dGhpcyBpcyBhIHNlY29uZCB0ZXN0IGtleSEh', valid: false, tamper: 'secret' },
    ],
  };
}

// flipHex / flipB64 change one character of the signature's value.
function flipHex(s) { const i = s.length - 1; return s.slice(0, i) + (s[i] === '0' ? '1' : '0'); }
function flipB64(s) { return (s[0] === 'A' ? 'B' : 'A') + s.slice(1); }

const kinds = {
  github: { pkg: '@octokit/webhooks-methods', make: githubVectors },
  shopify: { pkg: '@shopify/shopify-api', make: shopifyVectors },
  slack: { pkg: '@slack/bolt', make: slackVectors },
  twilio: { pkg: 'twilio', make: twilioVectors },
  paddle: { pkg: '@paddle/paddle-node-sdk', make: paddleVectors },
  square: { pkg: 'square', make: squareVectors },
  svix: { pkg: 'svix', make: svixVectors },
  mailgun: { pkg: 'mailgun-js', make: mailgunVectors },
};

for (const [kind, k] of Object.entries(kinds)) {
  const dir = path.join(outDir, kind);
  if (!checkOnly) {
    const made = await k.make();
    // Every vector is checked with the library before it is written.
    for (const v of made.vectors) {
      expect(kind, v.name, v.valid, await verifiers[kind](v));
    }
    const doc = {
      kind,
      provenance: { package: k.pkg, version: version(k.pkg), signed_with: made.signer, verified_with: made.verifier, node: process.version, generator: 'scripts/sender-vectors/gen.mjs' },
      vectors: made.vectors,
    };
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'vectors.json'), JSON.stringify(doc, null, 2) + '\n');
  }
  // Vectors our Go signers wrote (HOOKLEDGER_WRITE_OURS=1 go test -run TestWriteOurs).
  const ours = path.join(dir, 'ours.json');
  if (fs.existsSync(ours)) {
    const doc = JSON.parse(fs.readFileSync(ours, 'utf8'));
    for (const v of doc.vectors) {
      expect(kind, 'ours: ' + v.name, v.valid, await verifiers[kind](v));
    }
    console.error(`${kind}: ${doc.vectors.length} vectors signed by hookledger checked with ${k.pkg} ${version(k.pkg)}`);
  } else {
    console.error(`${kind}: no ours.json yet`);
  }
}
if (hookledgerBin) {
  await checkSignVerb(hookledgerBin);
}
if (failures) {
  console.error(`${failures} disagreement(s)`);
  process.exit(1);
}
console.error('all vectors agree with the libraries');
