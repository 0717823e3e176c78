package cli

import (
	"strings"
	"testing"
)

func TestReadEvents(t *testing.T) {
	in := "event: stdout\ndata: {\"data\":\"a\"}\n\n: a comment\nevent: exit\ndata: {\"exit_code\":0}\n\ndata: one\ndata: two\n\n"
	var got []string
	if err := readEvents(strings.NewReader(in), func(name string, data []byte) error {
		got = append(got, name+"="+string(data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{`stdout={"data":"a"}`, `exit={"exit_code":0}`, "=one\ntwo"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}
