// A small order-status agent on the official openai npm SDK: the model calls one tool, the
// tool's result goes back, and the answer streams in piece by piece. It knows nothing about
// agenttape; `agenttape run -- node examples/node_agent/agent.mjs` replays it offline.
import { createRequire } from 'node:module';

// require() rather than import: it also finds an openai installed elsewhere on NODE_PATH.
const require = createRequire(import.meta.url);
const { OpenAI } = require('openai');

const ORDERS = {
  'A-1042': { status: 'shipped', carrier: 'DHL', eta: '2026-11-27' },
  'A-1043': { status: 'processing', carrier: null, eta: null },
};

const tools = [
  {
    type: 'function',
    function: {
      name: 'lookup_order',
      description: 'The status of a customer order.',
      parameters: {
        type: 'object',
        properties: { order_id: { type: 'string', enum: Object.keys(ORDERS) } },
        required: ['order_id'],
      },
    },
  },
];

const client = new OpenAI();
const model = 'gpt-4o-mini';
const messages = [
  { role: 'system', content: 'You answer questions about orders. Use the tools.' },
  { role: 'user', content: 'Where is my order A-1042?' },
];

const first = await client.chat.completions.create({ model, messages, tools, temperature: 0, seed: 7 });
const choice = first.choices[0].message;
messages.push(choice);
for (const call of choice.tool_calls ?? []) {
  const { order_id: orderId } = JSON.parse(call.function.arguments);
  const result = ORDERS[orderId] ?? { error: `no order ${orderId}` };
  console.log(`tool ${call.function.name}(${orderId}) -> ${JSON.stringify(result)}`);
  messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result) });
}

const stream = await client.chat.completions.create({ model, messages, temperature: 0, seed: 7, stream: true });
let pieces = 0;
process.stdout.write('answer: ');
for await (const chunk of stream) {
  const text = chunk.choices[0]?.delta?.content ?? '';
  if (text) {
    pieces += 1;
    process.stdout.write(text);
  }
}
process.stdout.write(`\n(${pieces} streamed pieces)\n`);
