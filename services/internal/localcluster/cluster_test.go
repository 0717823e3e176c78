package localcluster

import (
	"log/slog"
	"strings"
	"testing"
)

// TestPlanMinIOUsers: each service that keeps objects (the workspaces'
// files, the approval service's audit trail, the router's stored
// responses) is planned a MinIO user of its own, which Start makes before
// any service starts, and gets it in the variables it reads; none holds
// MinIO's root keys, and no two share a key or a bucket.
func TestPlanMinIOUsers(t *testing.T) {
	t.Parallel()
	c := &Cluster{
		opts:    Options{Dir: t.TempDir(), Conch: "conch", MinIO: "minio", Replicas: 2, EtcdMembers: 1},
		log:     slog.New(slog.DiscardHandler),
		members: map[string]*member{},
	}
	if err := c.plan(); err != nil {
		t.Fatal(err)
	}
	s := c.state.S3
	prefixes := map[string]string{KindWorkspace: "CONCH_S3_", KindApproval: "CONCH_AUDIT_S3_", KindRouter: "CONCH_RESPONSES_S3_"}
	keys, buckets := map[string]string{}, map[string]string{}
	for kind := range prefixes {
		u, ok := s.Users[kind]
		if !ok || u.Service != kind || u.AccessKey == "" || u.SecretKey == "" || u.Bucket == "" {
			t.Fatalf("the %s service's MinIO user is %+v, want one of its own", kind, u)
		}
		if u.AccessKey == s.AccessKey {
			t.Errorf("the %s service's access key is MinIO's root user", kind)
		}
		if other, ok := keys[u.AccessKey]; ok {
			t.Errorf("the %s and %s services share the access key %s", other, kind, u.AccessKey)
		}
		if other, ok := buckets[u.Bucket]; ok {
			t.Errorf("the %s and %s services share the bucket %s", other, kind, u.Bucket)
		}
		keys[u.AccessKey], buckets[u.Bucket] = kind, kind
	}
	if len(s.Users) != len(prefixes) {
		t.Errorf("MinIO users for %d services, want %d", len(s.Users), len(prefixes))
	}
	if got := s.Users[KindRouter].Bucket; got != "conch-responses" {
		t.Errorf("the router's bucket is %s, want conch-responses", got)
	}

	routers := 0
	for _, st := range c.state.Members {
		m := c.members[st.Name]
		env := map[string]string{}
		for _, kv := range m.env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if st.Kind == KindMinIO {
			continue
		}
		for k, v := range env {
			if strings.HasPrefix(k, "MINIO_ROOT_") || (strings.HasSuffix(k, "_SECRET_KEY") && v == s.SecretKey) {
				t.Errorf("%s holds MinIO's root keys (%s)", st.Name, k)
			}
		}
		prefix, ok := prefixes[st.Kind]
		if !ok {
			continue
		}
		if st.Kind == KindRouter {
			routers++
		}
		u := s.Users[st.Kind]
		for k, want := range map[string]string{"ENDPOINT": s.Endpoint, "ACCESS_KEY": u.AccessKey, "SECRET_KEY": u.SecretKey, "BUCKET": u.Bucket} {
			if got := env[prefix+k]; got != want {
				t.Errorf("%s: %s%s=%q, want %q", st.Name, prefix, k, got, want)
			}
		}
	}
	if routers != 2 {
		t.Errorf("%d routers planned, want 2", routers)
	}
}
