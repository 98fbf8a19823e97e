// The TypeScript MCP SDK client the web tests run against `coffer serve --http`.
//
// usage: node mcp_client.mjs URL KB QUERY   (bearer token, if any, in $COFFER_TEST_TOKEN)
// Connects over streamable HTTP, lists the tools, runs one search, prints one JSON line.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, kb, query] = process.argv.slice(2);
const token = process.env.COFFER_TEST_TOKEN;
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : undefined;

const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
const client = new Client({ name: "coffer-ts-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const result = await client.callTool({ name: "coffer__search_knowledge", arguments: { kb, query, top_k: 3 } });
console.log(JSON.stringify({
  tools: tools.tools.map((tool) => tool.name),
  structured: result.structuredContent,
  isError: result.isError ?? false,
}));
await client.close();
