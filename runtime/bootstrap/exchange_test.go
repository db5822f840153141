package bootstrap

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("kY3v9QzL1pW7xR2mN8bT5cJ0aH4eG6fD")

func testID(t *testing.T) ID {
	t.Helper()
	id, err := NewID(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// serveOn starts rank 0's side on a loopback port and returns the port
// and the channel ServeID's result arrives on.
func serveOn(t *testing.T, x Exchange, id ID) (int, chan error) {
	t.Helper()
	ln, _, found, err := ListenExchange("127.0.0.1", 0)
	if err != nil || !found {
		t.Fatalf("ListenExchange: found %v, %v", found, err)
	}
	x.Port = ln.Addr().(*net.TCPAddr).Port
	done := make(chan error, 1)
	go func() { done <- ServeID(ln, x, id) }()
	return x.Port, done
}

func fetcher(port, rank, nranks int, secret []byte, within time.Duration) Exchange {
	return Exchange{Host: "127.0.0.1", Port: port, Rank: rank, NRanks: nranks, Round: 1, Secret: secret,
		Deadline: time.Now().Add(within)}
}

func TestExchangeHandsTheIDToEveryRank(t *testing.T) {
	id := testID(t)
	port, served := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 4, Round: 1, Secret: testSecret,
		Deadline: time.Now().Add(30 * time.Second)}, id)
	var wg sync.WaitGroup
	for r := 1; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			got, err := FetchID(fetcher(port, r, 4, testSecret, 30*time.Second))
			if err != nil || got != id {
				t.Errorf("rank %d: got the id %v, err %v", r, got == id, err)
			}
		}(r)
	}
	wg.Wait()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A stranger without the secret gets nothing, and rank 0 says so when the
// real ranks do not come.
func TestExchangeStrangerGetsNothing(t *testing.T) {
	id := testID(t)
	port, served := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 2, Round: 1, Secret: testSecret,
		Deadline: time.Now().Add(3 * time.Second)}, id)
	for _, guess := range [][]byte{nil, []byte("guess-guess-guess-guess-guess")} {
		_, err := FetchID(fetcher(port, 1, 2, guess, time.Second))
		if err == nil || !strings.Contains(err.Error(), "did not prove it holds this job's rendezvous secret") {
			t.Fatalf("secret %q: want an authentication failure, got %v", guess, err)
		}
	}
	err := <-served
	if err == nil || !strings.Contains(err.Error(), "rank(s) 1") || !strings.Contains(err.Error(), "failed authentication") {
		t.Fatalf("rank 0: want a timeout naming rank 1 and the failed authentications, got %v", err)
	}
}

// Whoever squats on MASTER_PORT without the secret is not taken for rank
// 0: the fetcher never takes its id.
func TestExchangeRefusesAnImpostorRankZero(t *testing.T) {
	fake := testID(t)
	port, _ := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 2, Round: 1, Secret: []byte("impostor-secret-0123456789abcdef"),
		Deadline: time.Now().Add(5 * time.Second)}, fake)
	// The fetcher retries until its deadline; the impostor's refusal is named
	// even when the deadline cuts a later dial (a loaded host).
	got, err := FetchID(fetcher(port, 1, 2, testSecret, 4*time.Second))
	if err == nil || got == fake || !strings.Contains(err.Error(), "did not prove") {
		t.Fatalf("want the impostor refused, got id match %v, err %v", got == fake, err)
	}
}

// Silent connections do not hold up the real ranks: fetchers are served
// concurrently (one at a time, 10 of them held each for the handshake
// deadline would take 50 s).
func TestExchangeSilentConnectionsDoNotStall(t *testing.T) {
	id := testID(t)
	port, served := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 2, Round: 1, Secret: testSecret,
		Deadline: time.Now().Add(60 * time.Second)}, id)
	for i := 0; i < 10; i++ {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	start := time.Now()
	if got, err := FetchID(fetcher(port, 1, 2, testSecret, 20*time.Second)); err != nil || got != id {
		t.Fatalf("fetch behind silent connections: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	t.Logf("fetched behind 10 silent connections in %v", time.Since(start))
}

// Without a secret: a rank outside the world and a second claim of a
// counted rank are refused, and a mismatched world size learns nothing of
// rank 0's.
func TestExchangeWithoutSecretRefusesStrays(t *testing.T) {
	id := testID(t)
	port, served := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 3, Round: 1,
		Deadline: time.Now().Add(30 * time.Second)}, id)
	if _, err := FetchID(fetcher(port, 1, 7, nil, 5*time.Second)); err == nil ||
		!strings.Contains(err.Error(), "WORLD_SIZE=7, which is not rank 0's") || strings.Contains(err.Error(), "3") {
		t.Fatalf("world mismatch: %v", err)
	}
	if _, err := FetchID(fetcher(port, 5, 3, nil, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "outside the world") {
		t.Fatalf("rank outside the world: %v", err)
	}
	if got, err := FetchID(fetcher(port, 1, 3, nil, 5*time.Second)); err != nil || got != id {
		t.Fatalf("rank 1: %v", err)
	}
	if _, err := FetchID(fetcher(port, 1, 3, nil, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "already given the unique id to another process that claimed rank 1") {
		t.Fatalf("second rank 1: %v", err)
	}
	if got, err := FetchID(fetcher(port, 2, 3, nil, 5*time.Second)); err != nil || got != id {
		t.Fatalf("rank 2: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// With the secret, a mismatch is told in full; a rank of another round is
// told to wait.
func TestExchangeMismatchesAreNamed(t *testing.T) {
	id := testID(t)
	port, _ := serveOn(t, Exchange{Host: "127.0.0.1", NRanks: 3, Round: 2, Secret: testSecret,
		Deadline: time.Now().Add(30 * time.Second)}, id)
	if _, err := FetchID(fetcher(port, 1, 4, testSecret, 5*time.Second)); err == nil ||
		!strings.Contains(err.Error(), "rank 1 has WORLD_SIZE=4 but rank 0 has WORLD_SIZE=3") {
		t.Fatalf("world mismatch: %v", err)
	}
	x := fetcher(port, 1, 3, testSecret, 500*time.Millisecond)
	x.Round = 1
	if _, err := FetchID(x); err == nil || !strings.Contains(err.Error(), "another from_env round") {
		t.Fatalf("another round: %v", err)
	}
}

func TestWeakSecretsAreRefused(t *testing.T) {
	for _, s := range []string{"s3cret", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abcabcabcabcabcabcabcabc"} {
		if err := CheckSecret([]byte(s)); err == nil || !strings.Contains(err.Error(), "GOCL_RENDEZVOUS_SECRET") {
			t.Errorf("%q: want refused, got %v", s, err)
		}
	}
	if err := CheckSecret(testSecret); err != nil {
		t.Error(err)
	}
}
