package s3store_test

import (
	"testing"

	"github.com/conch-sh/conch/services/workspace/miniotest"
	"github.com/conch-sh/conch/services/workspace/store"
	"github.com/conch-sh/conch/services/workspace/store/s3store"
	"github.com/conch-sh/conch/services/workspace/store/storetest"
)

func TestContract(t *testing.T) {
	m := miniotest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
