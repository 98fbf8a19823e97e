// The TypeScript MCP SDK's OAuth client against `coffer serve --http --auth oauth`.
//
// usage: node mcp_oauth_client.mjs URL KB QUERY   (the owner's password in $COFFER_TEST_PASSWORD)
// Connects without a token: the SDK discovers the authorization server from the 401, registers,
// and "opens the browser" at the authorization URL, where this script plays the owner through the
// consent page's HTML form; the answer lands on a loopback redirect URI served here, whose code the
// SDK exchanges. Then it lists the tools, runs one search and prints one JSON line.

import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, kb, query] = process.argv.slice(2);
const password = process.env.COFFER_TEST_PASSWORD;

// The client's redirect URI: a loopback server that keeps what the browser brings it.
const arrived = [];
const callback = http.createServer((request, response) => {
  arrived.push(new URL(request.url, "http://127.0.0.1").searchParams);
  response.end("You may close this window.");
});
await new Promise((resolve) => callback.listen(0, "127.0.0.1", resolve));
const redirectUrl = `http://127.0.0.1:${callback.address().port}/callback`;

let tokens, clientInformation, verifier, authorizationUrl;
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return {
      client_name: "TypeScript test client",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation() { return clientInformation; },
  saveClientInformation(information) { clientInformation = information; },
  tokens() { return tokens; },
  saveTokens(saved) { tokens = saved; },
  redirectToAuthorization(target) { authorizationUrl = target; },
  saveCodeVerifier(saved) { verifier = saved; },
  codeVerifier() { return verifier; },
};

// The owner in a browser: the consent page, the password, "Allow"; then on to the redirect URI.
async function consent(target) {
  const started = await fetch(target, { redirect: "manual" });
  const pageUrl = new URL(started.headers.get("location"), target);
  const page = await fetch(pageUrl);
  const cookie = page.headers.get("set-cookie").split(";")[0];
  const html = await page.text();
  const field = (name) => html.match(new RegExp(`name="${name}" value="([^"]*)"`))[1];
  const scopes = [...html.matchAll(/name="scope" value="([^"]+)" checked/g)].map((m) => ["scope", m[1]]);
  const form = new URLSearchParams([
    ["request", field("request")], ["csrf", field("csrf")], ["secret", password], ["decision", "approve"], ...scopes,
  ]);
  const answer = await fetch(new URL("/authorize/consent", target), {
    method: "POST",
    body: form,
    headers: { cookie, "content-type": "application/x-www-form-urlencoded" },
    redirect: "manual",
  });
  await fetch(answer.headers.get("location"));
  return arrived.at(-1).get("code");
}

const first = new Client({ name: "coffer-ts-oauth-test", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
try {
  await first.connect(transport);
  throw new Error("connected without signing in");
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
}
await transport.finishAuth(await consent(authorizationUrl));

const client = new Client({ name: "coffer-ts-oauth-test", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
const tools = await client.listTools();
const result = await client.callTool({ name: "coffer__search_knowledge", arguments: { kb, query, top_k: 3 } });
console.log(JSON.stringify({
  tools: tools.tools.map((tool) => tool.name),
  structured: result.structuredContent,
  isError: result.isError ?? false,
  scope: tokens.scope,
  registered: Boolean(clientInformation?.client_id),
}));
await client.close();
callback.close();
