package etcdxtest

import "testing"

func TestStartForTest(t *testing.T) {
	cli := StartForTest(t)
	tests := []struct{ key, value string }{
		{"conch/a", "1"},
		{"conch/b", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if _, err := cli.Put(t.Context(), tt.key, tt.value); err != nil {
				t.Fatalf("put: %v", err)
			}
			resp, err := cli.Get(t.Context(), tt.key)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != tt.value {
				t.Errorf("get %s = %v, want %s", tt.key, resp.Kvs, tt.value)
			}
		})
	}
}
