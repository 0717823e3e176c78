package etcdx

import (
	"net/url"
	"testing"
)

func TestBindURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ advertised, bound string }{
		{"http://127.0.0.1:2379", "http://127.0.0.1:2379"},
		{"http://[::1]:2380", "http://[::1]:2380"},
		{"http://localhost:2379", "http://localhost:2379"},
		{"http://etcd-0:2379", "http://0.0.0.0:2379"},
		{"http://etcd-1.etcd.conch.svc:2380", "http://0.0.0.0:2380"},
	} {
		u, err := url.Parse(tc.advertised)
		if err != nil {
			t.Fatal(err)
		}
		if got := bindURL(*u); got.String() != tc.bound {
			t.Errorf("bindURL(%s) = %s, want %s", tc.advertised, got.String(), tc.bound)
		}
	}
}
