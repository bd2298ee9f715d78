/*
 * polylb for C++17: a header-only layer over the C ABI of polylb.h. Link the same library
 * (libpolylb.a or libpolylb.so; examples/c/README.md). Every call is the C call it names, with
 * C++ types: a balancer that frees itself, strings as std::string_view, elapsed time as
 * std::chrono, and results you cannot drop by mistake ([[nodiscard]]).
 *
 * ERRORS. Calls return a Status (cold calls: create, update, method, stats) or a Selection
 * (select, select_among), which say what the C call returned and, for create and update, the
 * library's message (a rejected config names the key and the nearest valid one; a rejected set,
 * the invoker at fault). `check()` on either turns an error into a polylb::Error exception
 * where exceptions are enabled; under -fno-exceptions it prints the message and aborts, so test
 * ok() there. Only the conveniences built on check() throw by themselves: the Balancer(config)
 * constructor and method(name) (neither exists under -fno-exceptions). Memory exhaustion in a
 * cold call raises std::bad_alloc as the standard library does; hot calls (select,
 * select_among, report, Call) never allocate.
 *
 * Translation units built with and without exceptions see the API in different inline
 * namespaces (check() differs between them), so a program that mixes them and passes polylb
 * objects between them fails to link rather than aborting where a throw was expected.
 *
 * THREADS. A Balancer may be used from any number of threads at once, update included; its
 * destructor (and a move onto it) must come after every other call on it has returned, as
 * plb_balancer_free requires.
 */

#ifndef POLYLB_HPP
#define POLYLB_HPP

/* Said plainly up front: an older standard otherwise fails deep inside the header, on an inline
 * variable or std::string_view. MSVC reports 199711L in __cplusplus without /Zc:__cplusplus. */
#if defined(_MSVC_LANG) ? _MSVC_LANG < 201703L : __cplusplus < 201703L
#error "polylb.hpp needs C++17 or later (-std=c++17, /std:c++17); C and older C++ can use polylb.h"
#else /* C++17: the whole header */

#include "polylb.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define POLYLB_HPP_EXCEPTIONS 1
#else
#define POLYLB_HPP_EXCEPTIONS 0
#endif

namespace polylb {
#if POLYLB_HPP_EXCEPTIONS
inline namespace with_exceptions {
#else
inline namespace without_exceptions {
#endif

/** A method id from Balancer::method; 0 is the service level (the empty name). */
using Method = std::uint32_t;

/** How a call ended: a verdict on the provider (docs/outcomes.md). */
enum class Outcome : std::int32_t {
    /** The provider answered, also with an error of the service's own. */
    Success = PLB_OUTCOME_SUCCESS,
    /** The provider could not serve (refused, reset, unavailable, overloaded, broken). */
    Failure = PLB_OUTCOME_FAILURE,
    /** The caller's deadline passed before the answer (also counted as a failure). */
    Timeout = PLB_OUTCOME_TIMEOUT,
    /** Never sent, or given up by its caller: only the in-flight count is undone. */
    Cancelled = PLB_OUTCOME_CANCELLED,
};

/** What Status::check and Selection::check throw: the status code and the full message. */
class Error : public std::runtime_error {
public:
    Error(std::int32_t code, const std::string &message)
        : std::runtime_error(message), code_(code) {}
    /** PLB_ERR_* (positive). */
    std::int32_t code() const noexcept { return code_; }

private:
    std::int32_t code_;
};

namespace detail {
inline const std::uint8_t *bytes(std::string_view s) noexcept {
    return reinterpret_cast<const std::uint8_t *>(s.data());
}

/** The library's message: the `len` bytes it wrote. */
inline std::string message(const std::string &buf, std::size_t len) {
    return buf.substr(0, std::min(len, buf.size() - 1));
}

/** Whether the library may have cut its message to fit the buffer, so that a larger one
 * should be asked for (up to 1 MiB). It cuts at a character boundary, so a cut message can
 * leave up to 3 bytes of a UTF-8 character unused besides the NUL. */
inline bool filled(const std::string &buf, std::size_t len) noexcept {
    return len + 4 >= buf.size() && buf.size() < (std::size_t{1} << 20);
}

[[noreturn]] inline void fail(std::int32_t code, const std::string &message) {
#if POLYLB_HPP_EXCEPTIONS
    throw Error(code, message);
#else
    std::fprintf(stderr, "polylb: error %d: %s\n", static_cast<int>(code), message.c_str());
    std::abort();
#endif
}
} // namespace detail

/** PLB_OK or a PLB_ERR_* code, with the library's message for cold calls. */
class [[nodiscard]] Status {
public:
    Status() noexcept = default;
    /** A code, positive or negated (as hot C calls return it). */
    explicit Status(std::int32_t code) noexcept : code_(positive(code)) {}
    Status(std::int32_t code, std::string detail)
        : code_(positive(code)), detail_(std::move(detail)) {}

    bool ok() const noexcept { return code_ == PLB_OK; }
    explicit operator bool() const noexcept { return ok(); }
    /** PLB_OK or a positive PLB_ERR_* code. */
    std::int32_t code() const noexcept { return code_; }
    /** The code's text, then the library's detail when it gave one. */
    std::string message() const {
        std::string m = plb_status_str(code_);
        if (!detail_.empty()) {
            m += ": ";
            m += detail_;
        }
        return m;
    }
    /** Throws polylb::Error unless ok() (aborts under -fno-exceptions). */
    void check() const {
        if (!ok())
            detail::fail(code_, message());
    }

private:
    // INT32_MIN has no positive form (negating it is undefined): INT32_MAX, a code no status
    // has, which plb_status_str names as unknown.
    static constexpr std::int32_t positive(std::int32_t code) noexcept {
        return code >= 0 ? code : code == INT32_MIN ? INT32_MAX : -code;
    }

    std::int32_t code_ = PLB_OK;
    std::string detail_;
};

/** The result of a select: an invoker id, or why there is none. */
class [[nodiscard]] Selection {
public:
    explicit Selection(std::int64_t raw) noexcept : raw_(raw) {}

    [[nodiscard]] bool ok() const noexcept { return raw_ >= 0; }
    explicit operator bool() const noexcept { return ok(); }
    /** The chosen invoker's id; only meaningful when ok(). Report it, or the pick stays in
     * flight. */
    [[nodiscard]] std::uint64_t id() const noexcept { return static_cast<std::uint64_t>(raw_); }
    /** PLB_OK, or why nothing was chosen (PLB_ERR_NO_PROVIDER, PLB_ERR_NO_CANDIDATE, ...). */
    Status status() const { return ok() ? Status() : Status(code()); }
    /** The id; throws polylb::Error unless ok() (aborts under -fno-exceptions). */
    [[nodiscard]] std::uint64_t check() const {
        if (!ok())
            detail::fail(code(), status().message());
        return id();
    }

private:
    // The positive code of a negative raw_; one beyond any status (a raw_ the library never
    // returns, built by hand) is INT32_MAX, which plb_status_str names as unknown, never 0.
    std::int32_t code() const noexcept {
        return raw_ >= -INT32_MAX ? static_cast<std::int32_t>(-raw_) : INT32_MAX;
    }

    std::int64_t raw_;
};

/** One provider of the set (plb_invoker with owned strings and Dubbo's defaults). */
struct Invoker {
    /** Stable identity, unique in the set, at most INT64_MAX. */
    std::uint64_t id = 0;
    /** "host:port": places the invoker on the consistent-hash ring. */
    std::string address;
    /** At least 0; Dubbo's default is 100. */
    std::int32_t weight = 100;
    /** Provider start, Unix ms; 0 or less = unknown (no warm-up). */
    std::int64_t start_time_ms = 0;
    /** Warm-up period in ms; negative = the balancer's `warmup` (default 600000). */
    std::int32_t warmup_ms = -1;
    /** Optional zone, for `zone=` preference. */
    std::string zone;

    Invoker() = default;
    Invoker(std::uint64_t id_, std::string address_, std::int32_t weight_ = 100)
        : id(id_), address(std::move(address_)), weight(weight_) {}
};

/**
 * A borrowed list of invoker ids, for the parameters of select_among: a vector or an array that
 * outlives the call, a braced list, or a pointer and size. It does not own the ids, so do not
 * keep one in a variable: a braced list lives only until the end of its full expression, and a
 * temporary vector or array is refused for that reason.
 */
class Ids {
public:
    Ids() noexcept = default;
    Ids(const std::uint64_t *data, std::size_t size) noexcept : data_(data), size_(size) {}
    Ids(const std::vector<std::uint64_t> &v) noexcept : data_(v.data()), size_(v.size()) {}
    Ids(std::vector<std::uint64_t> &&) = delete;
    template <std::size_t N>
    Ids(const std::array<std::uint64_t, N> &a) noexcept : data_(a.data()), size_(N) {}
    template <std::size_t N>
    Ids(std::array<std::uint64_t, N> &&) = delete;
    Ids(std::initializer_list<std::uint64_t> l) noexcept : Ids(l.begin(), l.size()) {}

    const std::uint64_t *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }

private:
    const std::uint64_t *data_ = nullptr;
    std::size_t size_ = 0;
};

class Call;

/**
 * A balancer (plb_balancer), freed when it goes out of scope. Move-only. A default-constructed
 * or moved-from Balancer holds nothing: its calls return PLB_ERR_NULL_POINTER.
 */
class Balancer {
public:
    Balancer() noexcept = default;

    /**
     * A balancer from a config string of Dubbo URL parameters
     * (`loadbalance=leastactive&warmup=600000`; empty = `random`). On error, `out` is left as
     * it was and the Status carries the library's message (the key at fault and the nearest
     * valid one).
     */
    static Status create(std::string_view config, Balancer &out) {
        plb_balancer *handle = nullptr;
        std::string err(1024, '\0');
        std::size_t err_len = 0;
        std::int32_t rc = plb_balancer_new(detail::bytes(config), config.size(), &handle,
                                           err.data(), err.size(), &err_len);
        while (rc != PLB_OK && detail::filled(err, err_len)) {
            // The message may have been cut (a long config quoted in it): a rejected config
            // creates nothing, so asking again with more room only gets more of the text.
            err.assign(err.size() * 8, '\0');
            rc = plb_balancer_new(detail::bytes(config), config.size(), &handle, err.data(),
                                  err.size(), &err_len);
        }
        if (rc != PLB_OK)
            return Status(rc, detail::message(err, err_len));
        out = Balancer(handle);
        return Status();
    }

#if POLYLB_HPP_EXCEPTIONS
    /** As create(), throwing polylb::Error on a rejected config. */
    explicit Balancer(std::string_view config) { create(config, *this).check(); }
#endif

    ~Balancer() { plb_balancer_free(handle_); }
    Balancer(const Balancer &) = delete;
    Balancer &operator=(const Balancer &) = delete;
    Balancer(Balancer &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Balancer &operator=(Balancer &&other) noexcept {
        if (this != &other)
            plb_balancer_free(std::exchange(handle_, std::exchange(other.handle_, nullptr)));
        return *this;
    }

    /** Whether it holds a balancer. */
    explicit operator bool() const noexcept { return handle_ != nullptr; }
    /** The C handle, for code that calls polylb.h directly; still owned by this object. */
    plb_balancer *get() const noexcept { return handle_; }

    /**
     * Replaces the whole set atomically; the state of ids that stay is kept. A rejected set
     * changes nothing (the Status names the invoker at fault).
     */
    Status update(const std::vector<Invoker> &set) const {
        std::vector<plb_invoker> c(set.size());
        for (std::size_t i = 0; i < set.size(); i++) {
            const Invoker &v = set[i];
            c[i] = plb_invoker{v.id,
                               detail::bytes(v.address),
                               v.address.size(),
                               v.weight,
                               v.start_time_ms,
                               v.warmup_ms,
                               v.zone.empty() ? nullptr : detail::bytes(v.zone),
                               v.zone.size()};
        }
        std::string err(1024, '\0');
        std::size_t err_len = 0;
        std::int32_t rc =
            plb_balancer_update(handle_, c.data(), c.size(), err.data(), err.size(), &err_len);
        while (rc != PLB_OK && detail::filled(err, err_len)) {
            // Maybe cut: a rejected set changes nothing, so asking again only gets more text.
            err.assign(err.size() * 8, '\0');
            rc = plb_balancer_update(handle_, c.data(), c.size(), err.data(), err.size(),
                                     &err_len);
        }
        return rc == PLB_OK ? Status() : Status(rc, detail::message(err, err_len));
    }

    /** Interns a method name (the same name always gets the same id; "" is 0). */
    Status method(std::string_view name, Method &out) const {
        return Status(plb_balancer_method(handle_, detail::bytes(name), name.size(), &out));
    }

#if POLYLB_HPP_EXCEPTIONS
    /** As method(name, out), throwing polylb::Error on failure. */
    Method method(std::string_view name) const {
        Method m = 0;
        method(name, m).check();
        return m;
    }
#endif

    /**
     * Picks an invoker for one call and counts it in flight until its report. `key` is the
     * hash key of consistenthash, boundedhash, maglev and rendezvous (ignored by the others).
     * `now_us`: Unix microseconds, 0 = the library's clock.
     */
    Selection select(Method method = 0, std::string_view key = {},
                     std::int64_t now_us = 0) const noexcept {
        return Selection(plb_select(handle_, method, detail::bytes(key), key.size(), now_us));
    }

    /**
     * select over `candidates` (empty = the whole set) minus `excluded` (ids a failover already
     * tried; unknown ones are ignored). PLB_ERR_NO_CANDIDATE when nothing is left.
     */
    Selection select_among(Method method, std::string_view key, Ids candidates, Ids excluded,
                           std::int64_t now_us = 0) const noexcept {
        return Selection(plb_select_among(handle_, method, detail::bytes(key), key.size(),
                                          candidates.data(), candidates.size(), excluded.data(),
                                          excluded.size(), now_us));
    }

    /** Ends a call picked by select: its latency and outcome, exactly once per pick. */
    Status report(Method method, std::uint64_t id, std::chrono::microseconds elapsed,
                  Outcome outcome, std::int64_t now_us = 0) const noexcept {
        return Status(plb_report(handle_, method, id, elapsed.count(),
                                 static_cast<std::int32_t>(outcome), now_us));
    }

    /**
     * The provider's own metrics for `adaptive` (Dubbo's lb_adaptive attachment): its clock
     * in ms, its CPU load and the call's response time.
     */
    Status report_provider_metrics(Method method, std::uint64_t id,
                                   std::int64_t provider_time_ms, double cpu_load,
                                   std::chrono::microseconds rt,
                                   std::int64_t now_us = 0) const noexcept {
        return Status(plb_report_provider_metrics(handle_, method, id, provider_time_ms,
                                                  cpu_load, rt.count(), now_us));
    }

    /**
     * A provider's load report for `orca` (ORCA's queries and errors per second and its
     * utilization), kept per invoker.
     */
    Status report_load(std::uint64_t id, double qps, double eps, double utilization,
                       std::int64_t now_us = 0) const noexcept {
        return Status(plb_report_load(handle_, id, qps, eps, utilization, now_us));
    }

    /**
     * Invoker `id`'s connection was established again: under `orca` its run of load reports
     * restarts (its weight stops counting; its next report starts a new blackout), as gRPC's
     * weighted_round_robin does. Other strategies ignore it.
     */
    Status report_reconnect(std::uint64_t id, std::int64_t now_us = 0) const noexcept {
        return Status(plb_report_reconnect(handle_, id, now_us));
    }

    /** A JSON snapshot of the set and its counters (effective weights at `now_us`). */
    Status stats(std::string &out, std::int64_t now_us = 0) const {
        // A first guess, so that a small set is written once; when it does not fit, the library
        // says how much is needed (counters may grow meanwhile: room to spare).
        std::string buf(std::max<std::size_t>(out.capacity(), 4096), '\0');
        for (;;) {
            std::size_t len = 0;
            std::int32_t rc = plb_balancer_stats(handle_, now_us, buf.data(), buf.size(), &len);
            if (rc == PLB_OK) {
                buf.resize(len);
                out = std::move(buf);
                return Status();
            }
            if (rc != PLB_ERR_BUFFER_TOO_SMALL)
                return Status(rc);
            buf.assign(len + len / 4 + 64, '\0');
        }
    }

    /** Selects for one call and reports it when the Call ends (see Call). */
    Call call(Method method = 0, std::string_view key = {}) const noexcept;

    /** call() among `candidates` (empty = the whole set) minus `excluded` (a failover's tried
     * invokers), as select_among. */
    Call call_among(Method method, std::string_view key, Ids candidates,
                    Ids excluded) const noexcept;

private:
    explicit Balancer(plb_balancer *handle) noexcept : handle_(handle) {}
    plb_balancer *handle_ = nullptr;
};

/**
 * One call: selected when made, reported exactly once. finish() reports it with the time since
 * the select (steady clock). A Call that ends without finish() is reported too, so no pick stays
 * in flight: as a Failure when an exception thrown after it was made unwinds it (as Python's
 * `with lb.call()` counts an exception leaving its block: catch the service's own errors, which
 * are answers, and finish(Outcome::Success)), else as Cancelled (an early return: no verdict on
 * the provider). Move-constructible but not assignable (assigning would have to end the call it
 * replaces): a failover retry takes a new variable, or a std::optional<Call> emplaced again.
 * End it on the thread that made it (the exceptions in flight are the thread's).
 * It must end before its balancer is freed: declare Calls after their Balancer. Moving the
 * Balancer elsewhere is fine, but destroying it or assigning another balancer to it (a move or
 * a create onto it) frees the one the Call reports to. Keep the Call in a variable:
 * `lb.call().check()` would end it at once, so id() and check() refuse a temporary.
 */
class [[nodiscard]] Call {
public:
    Call(const Balancer &balancer, Method method, Selection selection) noexcept
        : balancer_(balancer.get()), method_(method), selection_(selection),
          start_(std::chrono::steady_clock::now()), pending_(selection.ok()),
          exceptions_(std::uncaught_exceptions()) {}
    ~Call() {
        (void)finish(std::uncaught_exceptions() > exceptions_ ? Outcome::Failure
                                                               : Outcome::Cancelled);
    }
    Call(const Call &) = delete;
    Call &operator=(const Call &) = delete;
    /** The moved-from Call holds nothing (ok() is false) and reports nothing. */
    Call(Call &&other) noexcept
        : balancer_(other.balancer_), method_(other.method_),
          selection_(std::exchange(other.selection_, Selection(-PLB_ERR_NULL_POINTER))),
          start_(other.start_), pending_(std::exchange(other.pending_, false)),
          exceptions_(other.exceptions_) {}
    Call &operator=(Call &&) = delete;

    /** Whether an invoker was chosen; if not, status() says why and finish() does nothing. */
    [[nodiscard]] bool ok() const noexcept { return selection_.ok(); }
    explicit operator bool() const noexcept { return ok(); }
    /** The chosen invoker's id; only meaningful when ok(). */
    [[nodiscard]] std::uint64_t id() const & noexcept { return selection_.id(); }
    std::uint64_t id() const && = delete;
    Status status() const { return selection_.status(); }
    /** The id; throws polylb::Error unless ok() (aborts under -fno-exceptions). */
    [[nodiscard]] std::uint64_t check() const & { return selection_.check(); }
    std::uint64_t check() const && = delete;

    /**
     * Reports the call with its elapsed time since the select. Only the first finish reports;
     * later ones, and finish on a Call that chose nothing, do nothing and return PLB_OK. If the
     * library refuses the report (an outcome that is no Outcome), the call is reported
     * Cancelled so that it does not stay in flight, and the refusal is returned.
     */
    Status finish(Outcome outcome) noexcept {
        if (!std::exchange(pending_, false))
            return Status();
        auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - start_);
        std::int32_t rc = plb_report(balancer_, method_, selection_.id(), elapsed.count(),
                                     static_cast<std::int32_t>(outcome), 0);
        if (rc == PLB_ERR_UNKNOWN_OUTCOME)
            (void)plb_report(balancer_, method_, selection_.id(), 0, PLB_OUTCOME_CANCELLED, 0);
        return Status(rc);
    }

private:
    const plb_balancer *balancer_;
    Method method_;
    Selection selection_;
    std::chrono::steady_clock::time_point start_;
    bool pending_;
    /** Exceptions in flight when the call was made: more at its end means one is unwinding it. */
    int exceptions_;
};

inline Call Balancer::call(Method method, std::string_view key) const noexcept {
    return Call(*this, method, select(method, key));
}

inline Call Balancer::call_among(Method method, std::string_view key, Ids candidates,
                                 Ids excluded) const noexcept {
    return Call(*this, method, select_among(method, key, candidates, excluded));
}

/** The library's version, e.g. "0.1.0". */
inline const char *version() noexcept { return plb_version(); }

/** PLB_ABI_VERSION of the library linked in; compare with PLB_ABI_VERSION of this header. */
inline std::uint32_t abi_version() noexcept { return plb_abi_version(); }

} // inline namespace
} // namespace polylb

#endif /* C++17 */

#endif // POLYLB_HPP
