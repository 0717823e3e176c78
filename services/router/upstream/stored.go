package upstream

// StoredMessage is a conversation's message as conch keeps it (a mixed
// turn, a stored response): what the upstream is sent, without the
// client's raw JSON.
type StoredMessage struct {
	Role       string       `json:"role"`
	Content    string       `json:"content,omitempty"`
	ToolCalls  []StoredCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

// StoredCall is a tool call of a StoredMessage.
type StoredCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// StoreMessages is msgs as kept.
func StoreMessages(msgs []Message) []StoredMessage {
	out := make([]StoredMessage, len(msgs))
	for i, m := range msgs {
		out[i] = StoredMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, StoredCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	return out
}

// LoadMessages is the conversation msgs keeps.
func LoadMessages(msgs []StoredMessage) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	return out
}
