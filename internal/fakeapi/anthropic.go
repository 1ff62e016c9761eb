// Package fakeapi is a stand-in for an AI provider's API that drives a real
// agent CLI through a scripted conversation: each reply asks the agent to
// run the next shell command of the script, and once every command's
// result is back, the reply ends the turn. It records every request, so a
// test can assert what the agent sent (its key, the results of its
// commands).
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Request is what the stand-in saw of one request.
type Request struct {
	Method, Path string
	// Key is the credential the request carried (x-api-key, or the bearer
	// token of Authorization).
	Key string
	// Results are the outputs of the script's commands the conversation
	// holds so far, in order.
	Results []string
}

// Anthropic serves the Messages API (streamed with server-sent events, or
// not) for Claude Code: tool_use blocks for its Bash tool.
type Anthropic struct {
	Script []string

	mu   sync.Mutex
	seen []Request
}

// Requests returns what was seen so far.
func (a *Anthropic) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.seen...)
}

type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// ServeHTTP implements http.Handler.
func (a *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var q anthropicRequest
	_ = json.Unmarshal(body, &q)
	var results []string
	for _, m := range q.Messages {
		var blocks []struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				results = append(results, resultText(b.Content))
			}
		}
	}
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		key = bearer(r.Header.Get("Authorization"))
	}
	a.mu.Lock()
	a.seen = append(a.seen, Request{Method: r.Method, Path: r.URL.Path, Key: key, Results: results})
	a.mu.Unlock()
	if r.Method != http.MethodPost {
		return
	}
	block := map[string]any{"type": "text", "text": "done"}
	stop := "end_turn"
	if n := len(results); n < len(a.Script) {
		block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n), "name": "Bash",
			"input": map[string]any{"command": a.Script[n], "description": fmt.Sprintf("step %d", n+1)}}
		stop = "tool_use"
	}
	usage := map[string]int{"input_tokens": 10, "output_tokens": 5}
	if !q.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": q.Model,
			"content": []any{block}, "stop_reason": stop, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(name string, v map[string]any) {
		v["type"] = name
		d, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, d)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	event("message_start", map[string]any{"message": map[string]any{"id": "msg_fake", "type": "message", "role": "assistant",
		"model": q.Model, "content": []any{}, "stop_reason": nil, "usage": usage}})
	if block["type"] == "tool_use" {
		input, _ := json.Marshal(block["input"])
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": "Bash", "input": map[string]any{}}})
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	} else {
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": block["text"]}})
	}
	event("content_block_stop", map[string]any{"index": 0})
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 5}})
	event("message_stop", map[string]any{})
}

// resultText is a tool_result's content: a string, or text blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	out := ""
	for _, b := range blocks {
		out += b.Text
	}
	return out
}

func bearer(h string) string {
	const p = "Bearer "
	if len(h) > len(p) && h[:len(p)] == p {
		return h[len(p):]
	}
	return ""
}
