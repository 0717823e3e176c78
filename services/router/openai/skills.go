package openai

import (
	"encoding/json"
	"fmt"

	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/completion"
)

// ParseSkillReferences reads OpenAI's list of skills for a container
// (the Responses API's container_auto environment, the Containers API's
// create): skill_reference entries, whose version is the default unless
// named ("latest" or a number). field is the list's ("skills").
func ParseSkillReferences(field string, raw json.RawMessage) ([]completion.SkillRef, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := wirejson.Strict(raw, &list); err != nil {
		return nil, badField(field, "must be an array of skill references")
	}
	if len(list) == 0 {
		return nil, nil
	}
	refs := make([]completion.SkillRef, 0, len(list))
	for i, item := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		var sk struct {
			Type    string `json:"type"`
			SkillID string `json:"skill_id"`
			Version any    `json:"version"`
		}
		if err := wirejson.Strict(item, &sk); err != nil {
			return nil, badField(f, "must be {type: skill_reference, skill_id, version}")
		}
		switch sk.Type {
		case "skill_reference":
		case "inline":
			return nil, badField(f+".type", "conch does not take inline skills; upload the skill with POST /v1/skills and name it with a skill_reference")
		default:
			return nil, badField(f+".type", "must be skill_reference, got %q", sk.Type)
		}
		if sk.SkillID == "" {
			return nil, badField(f+".skill_id", "is required")
		}
		var version string
		switch v := sk.Version.(type) {
		case nil:
		case string:
			version = v
		case float64:
			version = fmt.Sprint(int64(v))
			if float64(int64(v)) != v || v < 1 {
				return nil, badField(f+".version", "must be a positive integer or \"latest\"")
			}
		default:
			return nil, badField(f+".version", "must be a positive integer or \"latest\"")
		}
		refs = append(refs, completion.SkillRef{ID: sk.SkillID, Version: version, Field: f})
	}
	return refs, nil
}
