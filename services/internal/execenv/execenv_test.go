package execenv

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, want string }{
		{"LANG", ""}, {"LC_ALL", ""}, {"LC_CTYPE", ""}, {"TZ", ""}, {"TERM", ""}, {"NO_COLOR", ""},
		{"BUILD_ID", ""}, {"API_BASE_URL", ""}, {"X", ""}, {"RELEASE_2", ""},
		{"", "empty variable name"}, {"A=B", "not a valid variable name"}, {"1X", "not a valid variable name"},
		{"BASH_FUNC_ls%%", "not a valid variable name"},
		{"my_var", "may not be set"}, {"http_proxy", "may not be set"}, {"_JAVA_OPTIONS", "may not be set"},
		{"POSIXLY_CORRECT", "POSIXLY* variables"}, {"GIT_SEQUENCE_EDITOR", "GIT* variables"},
		{"GIT_DIR", "GIT*"}, {"LD_PRELOAD", "LD_*"}, {"PYTHONPATH", "PYTHON*"}, {"PATH", "PATH_*"},
		{"HOME", "HOME_*"}, {"BASH_ENV", "BASH*"}, {"ENV", "ENV_*"}, {"PS4", "PS4_*"}, {"IFS", "IFS_*"},
		{"GOFLAGS", "GO*"}, {"NODE_OPTIONS", "NODE_*"}, {"NPM_CONFIG_SCRIPT_SHELL", "NPM_*"},
		{"LESSOPEN", "LESS*"}, {"PAGER", "PAGER_*"}, {"EDITOR", "EDITOR_*"}, {"TMPDIR", "TMP*"},
		{"MY_TOOL_CMD", "*_CMD"}, {"FOO_OPTIONS", "*_OPTIONS"}, {"PLUGIN_PATH", "*_PATH"}, {"X_PRELOAD", "*_PRELOAD"},
		{"CONCH_API_KEY", "CONCH_*"}, {"TRACEPARENT", "TRACEPARENT_*"},
	} {
		err := Check(tc.name)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckAll(t *testing.T) {
	t.Parallel()
	if err := CheckAll(map[string]string{"B_OK": "1", "A_CMD": "x", "C_CMD": "y"}); err == nil || !strings.Contains(err.Error(), "A_CMD") {
		t.Errorf("CheckAll names %v, want the first bad name A_CMD", err)
	}
	if err := CheckAll(map[string]string{"X": "a\x00b"}); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("NUL value: %v", err)
	}
	big := map[string]string{}
	for i := range MaxVars + 1 {
		big["V"+strings.Repeat("X", i)] = ""
	}
	if err := CheckAll(big); err == nil {
		t.Error("more than MaxVars variables accepted")
	}
}
