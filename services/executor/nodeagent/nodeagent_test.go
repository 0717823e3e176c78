package nodeagent

import "testing"

func TestDialTarget(t *testing.T) {
	tests := []struct {
		join, target string
		tls, ok      bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"http://127.0.0.1:8080/", "127.0.0.1:8080", false, true},
		{"https://conch.example.com", "conch.example.com:443", true, true},
		{"https://conch.example.com:8443", "conch.example.com:8443", true, true},
		{"ftp://conch.example.com", "", false, false},
		{"https://conch.example.com/api", "", false, false},
		{"https://", "", false, false},
	}
	for _, tt := range tests {
		target, creds, err := dialTarget(tt.join)
		if (err == nil) != tt.ok {
			t.Errorf("dialTarget(%q) error = %v, want ok=%v", tt.join, err, tt.ok)
			continue
		}
		if err != nil {
			continue
		}
		if target != tt.target || (creds.Info().SecurityProtocol == "tls") != tt.tls {
			t.Errorf("dialTarget(%q) = %q %s, want %q tls=%v", tt.join, target, creds.Info().SecurityProtocol, tt.target, tt.tls)
		}
	}
}
