package files

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/internal/store"
)

// Packs keep a workspace's small files in a few objects beside it, so that
// a hydration by a service that has not cached them costs a few requests
// rather than one per file: against MinIO each GET is a round trip of
// about a millisecond, whatever its size.
//
// A pack is a cache, never the record: the files' own objects stay the
// truth, every change still writes them under the lock, and a hydration
// takes content from a pack only where its SHA-256 is the one the listing
// names, which it checks on the bytes. A pack that is stale, missing or
// damaged costs the GETs it would have saved and nothing else, so packs
// are written without the lock and after the change is committed.
//
// A flush of many small files writes one pack of them; a hydration that
// still needed many GETs writes one pack of everything it sent and drops
// the packs it read. At most maxPacks stay per workspace (the oldest go
// first), and deleting "/" deletes them with the files.
const (
	// packMinFiles is the fewest files worth a pack, and the fewest
	// missing files for which a hydration looks for packs.
	packMinFiles = 32
	// packFileMax is the largest file packed.
	packFileMax = maxCachedFile
	// packMaxBytes bounds one pack's content.
	packMaxBytes = 16 << 20
	// maxPacks bounds a workspace's packs.
	maxPacks = 8
	// packReadBytes bounds the packs one hydration reads.
	packReadBytes = 32 << 20
	// packHydrations bounds the hydrations holding packs' content at
	// once: with packReadBytes, the memory packs may take in a service.
	packHydrations = 2
	// storeParallel bounds the requests one operation sends at once.
	storeParallel = 16
)

// packMagic starts every pack.
const packMagic = "conch-pack-1\n"

func (w Workspace) packPrefix() string { return w.base() + "packs/" }

// encodePack lays out files (content by SHA-256) as one object: the magic,
// then per file "<sha256> <size>\n" and the bytes.
func encodePack(files map[string][]byte) []byte {
	sums := make([]string, 0, len(files))
	n := len(packMagic)
	for sum, data := range files {
		sums = append(sums, sum)
		n += len(sum) + 22 + len(data)
	}
	slices.Sort(sums)
	b := make([]byte, 0, n)
	b = append(b, packMagic...)
	for _, sum := range sums {
		b = append(b, sum...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(files[sum])), 10)
		b = append(b, '\n')
		b = append(b, files[sum]...)
	}
	return b
}

// decodePack reads a pack from r and returns the content of the files in
// want whose bytes hash to their name. A damaged pack yields what came
// before the damage.
func decodePack(r io.Reader, want map[string]bool) map[string][]byte {
	out := map[string][]byte{}
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(packMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != packMagic {
		return out
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil || len(line) < 66 || line[64] != ' ' {
			return out
		}
		sum := string(line[:64])
		size, err := strconv.ParseInt(string(line[65:len(line)-1]), 10, 64)
		if err != nil || size < 0 || size > packFileMax {
			return out
		}
		if !want[sum] || out[sum] != nil {
			if _, err := br.Discard(int(size)); err != nil {
				return out
			}
			continue
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return out
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) == sum {
			out[sum] = data
		}
	}
}

// readPacks returns the content of the files in want found in ws's packs,
// and the keys of the packs read. Errors only cost the content missed.
func (s *Service) readPacks(ctx context.Context, ws Workspace, want map[string]bool) (map[string][]byte, []string) {
	var infos []store.Info
	var total int64
	for info, err := range s.store.List(ctx, ws.packPrefix(), true) {
		if err != nil {
			return nil, nil
		}
		if total += info.Size; total > packReadBytes {
			break
		}
		infos = append(infos, info)
	}
	var (
		mu   sync.Mutex
		got  = map[string][]byte{}
		keys []string
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
	)
	// Newest first: when two packs hold a file, the newer is read first.
	for _, info := range slices.Backward(infos) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rc, _, err := s.store.Get(ctx, info.Key)
			if err != nil {
				return
			}
			defer rc.Close()
			files := decodePack(rc, want)
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, info.Key)
			for sum, data := range files {
				got[sum] = data
			}
		})
	}
	wg.Wait()
	return got, keys
}

// packLater writes files (content by SHA-256) of ws at revision rev as
// packs in the background, then deletes drop and the packs beyond
// maxPacks. Close waits for it. A workspace changed since rev gets no
// pack: the content may be gone, and a pack must not outlive a delete of
// "/" that has already dropped the others.
func (s *Service) packLater(ctx context.Context, ws Workspace, rev int64, files map[string][]byte, drop []string) {
	s.background.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if st, _, err := s.locks.peek(ctx, ws); err != nil || st.Revision != rev || st.Dirty {
			return
		}
		if err := s.writePacks(ctx, ws, files, drop); err != nil {
			slog.WarnContext(ctx, "writing a workspace pack failed; hydrations fetch its files one by one", "error", err)
		}
	})
}

func (s *Service) writePacks(ctx context.Context, ws Workspace, files map[string][]byte, drop []string) error {
	batch, size := map[string][]byte{}, 0
	put := func() error {
		if len(batch) == 0 {
			return nil
		}
		id := make([]byte, 8)
		_, _ = rand.Read(id)
		// Named by time, so that listing order is age order.
		key := fmt.Sprintf("%s%016x-%x", ws.packPrefix(), time.Now().UnixNano(), id)
		b := encodePack(batch)
		if _, err := s.store.Put(ctx, key, bytes.NewReader(b), store.PutOptions{Size: int64(len(b)), Mode: 0o600}); err != nil {
			return err
		}
		batch, size = map[string][]byte{}, 0
		return nil
	}
	for sum, data := range files {
		if size+len(data) > packMaxBytes {
			if err := put(); err != nil {
				return err
			}
		}
		batch[sum] = data
		size += len(data)
	}
	if err := put(); err != nil {
		return err
	}
	var keys []string
	for info, err := range s.store.List(ctx, ws.packPrefix(), true) {
		if err != nil {
			return err
		}
		if !slices.Contains(drop, info.Key) {
			keys = append(keys, info.Key)
		}
	}
	if len(keys) > maxPacks {
		drop = append(drop, keys[:len(keys)-maxPacks]...)
	}
	if len(drop) > 0 {
		return s.store.Delete(ctx, drop)
	}
	return nil
}

// dropPacks deletes all of ws's packs and its kept listing.
func (s *Service) dropPacks(ctx context.Context, ws Workspace) error {
	keys := []string{ws.manifestKey()}
	for info, err := range s.store.List(ctx, ws.packPrefix(), true) {
		if err != nil {
			return err
		}
		keys = append(keys, info.Key)
	}
	return s.store.Delete(ctx, keys)
}
