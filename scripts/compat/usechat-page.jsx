// The chat page of the useChat browser test (usechat.test.mjs bundles it with esbuild at test
// time): a React app as the AI SDK's docs write one. It loads the chat's saved messages from the
// backend (`GET /api/chats/{id}/messages`, passed through tether), then mounts
// `useChat({ id, messages, resume: true })` with a DefaultChatTransport on `/api/chat`, all on the
// page's own origin (tether's). A form sends a message; Stop calls the SDK's `stop()` and then
// the ai-sdk profile's stop route, `POST /api/chat/{id}/stop`. What the test reads is on
// `window.chatPage`: the messages, the status and every status the page rendered, what each
// resume got (a stream or none), the last error and the stop route's answer.
//
// The chat id comes from `?chat=`. `@ai-sdk/react` and `ai` are whichever major the bundle was
// built with (esbuild aliases them for the older one).

import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport } from "ai";
import { useEffect, useRef, useState } from "react";
import { createRoot } from "react-dom/client";

const chatId = new URLSearchParams(location.search).get("chat");

/** The SDK's transport, noting what each reconnectToStream (resume on mount) got: a stream or none. */
class NotingTransport extends DefaultChatTransport {
  async reconnectToStream(options) {
    const stream = await super.reconnectToStream(options);
    window.chatPage.resumes.push(stream ? "stream" : "none");
    return stream;
  }
}
const transport = new NotingTransport({ api: "/api/chat" });

window.chatPage = { mounted: false, status: null, statuses: [], messages: [], resumes: [], error: null, stopAnswer: null };

function Chat({ initial }) {
  const { messages, status, error, sendMessage, stop } = useChat({
    id: chatId,
    messages: initial,
    resume: true,
    transport,
  });
  const [input, setInput] = useState("");
  const seen = useRef([]);
  if (seen.current.at(-1) !== status) seen.current.push(status);

  useEffect(() => {
    Object.assign(window.chatPage, {
      mounted: true,
      status,
      statuses: [...seen.current],
      messages: JSON.parse(JSON.stringify(messages)),
      error: error ? String(error.message ?? error) : null,
    });
  });

  async function onStop() {
    stop();
    const r = await fetch(`/api/chat/${encodeURIComponent(chatId)}/stop`, { method: "POST" });
    window.chatPage.stopAnswer = { status: r.status, body: await r.text() };
  }

  const busy = status === "submitted" || status === "streaming";
  return (
    <main>
      <ol id="messages">
        {messages.map((m) => (
          <li key={m.id} data-role={m.role} data-id={m.id}>
            {m.parts.map((p, i) =>
              p.type === "text" || p.type === "reasoning" ? (
                <p key={i} className={p.type}>
                  {p.text}
                </p>
              ) : null,
            )}
          </li>
        ))}
      </ol>
      {busy ? <div id="spinner">…</div> : null}
      <p id="status">{status}</p>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
        <button id="send" type="submit" disabled={status !== "ready"}>
          Send
        </button>
        <button id="stop" type="button" onClick={onStop} disabled={!busy}>
          Stop
        </button>
      </form>
    </main>
  );
}

async function main() {
  const r = await fetch(`/api/chats/${encodeURIComponent(chatId)}/messages`);
  const initial = await r.json();
  createRoot(document.getElementById("root")).render(<Chat initial={initial} />);
}

main().catch((e) => {
  window.chatPage.error = String(e?.stack ?? e);
});
