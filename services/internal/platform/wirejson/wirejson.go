// Package wirejson decodes the JSON that crosses conch's OpenAI-compatible
// API and MCP server: a client's requests, which conch judges and then
// forwards; the arguments of the tool calls conch runs, which clients
// show their users; and an upstream model's answers.
//
// A client's request and a tool call's arguments are read strictly, so
// that conch and the upstream it forwards to, or the client that shows a
// call, cannot read one text two ways: a member named twice in any
// object and invalid UTF-8 are errors, and a member matches a field only
// by its exact name ("Role" is not "role"). encoding/json takes the last of
// two names, folds case and replaces invalid bytes, while the raw messages
// and fields conch forwards keep what it did not read. The strict reader
// reads in one pass, where encoding/json scans a value once to check it
// and again to decode it, so it is also faster on the completion's hot
// path.
//
// An upstream's answer is read as leniently as encoding/json reads it:
// conch does not control the servers it calls, and what it reads of an
// answer is what it returns.
package wirejson

import (
	"github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// lenient are encoding/json's semantics, read in one pass.
var lenient = jsonv1.DefaultOptionsV1()

// Strict decodes a client's JSON into v: names must match exactly and
// appear once per object, and strings must be valid UTF-8.
func Strict(data []byte, v any) error {
	return json.Unmarshal(data, v)
}

// Lenient decodes an upstream's JSON into v as encoding/json would: names
// match in any case, the last of two equal names wins, and invalid UTF-8
// becomes U+FFFD.
func Lenient(data []byte, v any) error {
	return json.Unmarshal(data, v, lenient)
}
