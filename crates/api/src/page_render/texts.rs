//! What the waiting page says, in each of its ten languages (SPEC §6.3).
//!
//! One [`Texts`] per language, so the compiler refuses a language missing a message; the
//! tests check none is empty and each keeps English's placeholders. The page's template
//! reads them as `t` and its script as `config.text`, both serialized from here; the
//! server-side renderings of the estimate ([`eta_text`], [`opens_in_text`]) fill the same
//! patterns the script fills, so the page reads alike before and after the script runs.

use serde::Serialize;

use super::lang::Lang;

/// A text for each state of the page (`heading`, `lead`).
#[derive(Debug, Serialize)]
pub(crate) struct PerState {
    waiting: &'static str,
    paused: &'static str,
    prequeue: &'static str,
    closed: &'static str,
    unavailable: &'static str,
    admitted: &'static str,
    left: &'static str,
    challenge: &'static str,
}

/// Every message of the page in one language. Patterns: `{n}` minutes; `{h}` hours and `{m}`
/// minutes; `{t}` a countdown clock; `{room}` a room's name.
#[derive(Debug, Serialize)]
pub(crate) struct Texts {
    title: &'static str,
    heading: PerState,
    lead: PerState,
    challenge_needs_js: &'static str,
    challenge_failed: &'static str,
    position: &'static str,
    ahead: &'static str,
    eta: &'static str,
    progress: &'static str,
    waiting_total: &'static str,
    updated: &'static str,
    keep_open: &'static str,
    paused_notice: &'static str,
    try_later: &'static str,
    leave: &'static str,
    /// The box that gives the place up when the page is closed (the leave intent).
    leave_on_close: &'static str,
    /// The name of the list of language links.
    language: &'static str,
    eta_unknown: &'static str,
    pub(crate) eta_paused: &'static str,
    eta_soon: &'static str,
    eta_minutes: &'static str,
    eta_hours: &'static str,
    eta_opens_in: &'static str,
    prequeue_notice: &'static str,
    /// Shown on a first tier's page when the visitor was sent here by the next room's
    /// `requires`; `{room}` is that room.
    next_step: &'static str,
}

/// The texts of `lang`.
pub(crate) fn texts(lang: Lang) -> &'static Texts {
    match lang {
        Lang::En => &ENGLISH,
        Lang::Ko => &KOREAN,
        Lang::Ja => &JAPANESE,
        Lang::ZhHans => &CHINESE_SIMPLIFIED,
        Lang::ZhHant => &CHINESE_TRADITIONAL,
        Lang::Es => &SPANISH,
        Lang::Fr => &FRENCH,
        Lang::De => &GERMAN,
        Lang::PtBr => &PORTUGUESE_BRAZIL,
        Lang::Id => &INDONESIAN,
    }
}

/// The estimate as the page shows it: under a minute, minutes, or hours and minutes; the
/// "estimating" text while there is none.
pub(crate) fn eta_text(lang: Lang, seconds: Option<u64>) -> String {
    let text = texts(lang);
    let Some(seconds) = seconds else {
        return text.eta_unknown.to_owned();
    };
    if seconds < 60 {
        return text.eta_soon.to_owned();
    }
    let minutes = seconds.div_ceil(60);
    if minutes < 60 {
        return text.eta_minutes.replace("{n}", &minutes.to_string());
    }
    text.eta_hours
        .replace("{h}", &(minutes / 60).to_string())
        .replace("{m}", &(minutes % 60).to_string())
}

/// The countdown of a pre-queue, as the page shows it before its script takes over.
pub(crate) fn opens_in_text(lang: Lang, seconds: u64) -> String {
    let (hours, minutes, secs) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let clock = if hours > 0 {
        format!("{hours}:{minutes:02}:{secs:02}")
    } else {
        format!("{minutes}:{secs:02}")
    };
    texts(lang).eta_opens_in.replace("{t}", &clock)
}

const ENGLISH: Texts = Texts {
    title: "You are in line",
    heading: PerState {
        waiting: "You are in line",
        paused: "The line is paused",
        prequeue: "The sale opens soon",
        closed: "This room is closed",
        unavailable: "Temporarily unavailable",
        admitted: "It is your turn",
        left: "You left the line",
        challenge: "Getting you a place in line",
    },
    lead: PerState {
        waiting: "Thanks for waiting. We will take you in automatically when it is your turn.",
        paused: "Entry is paused for a moment. You keep your place.",
        prequeue: "You are in the pre-queue. Keep this page open: you are taken in automatically once the sale opens and it is your turn.",
        closed: "Nobody is being let in right now.",
        unavailable: "The waiting room cannot be reached right now. Your place is kept.",
        admitted: "Taking you in…",
        left: "Your place has been given up.",
        challenge: "Your browser is doing a short check that keeps bots out of the line. This takes a few seconds.",
    },
    challenge_needs_js: "This waiting room needs JavaScript to give you a place in line. Please turn it on and reload the page.",
    challenge_failed: "The check did not work. Trying again…",
    position: "your number",
    ahead: "ahead of you",
    eta: "estimated wait",
    progress: "progress",
    waiting_total: "people waiting",
    updated: "updated",
    keep_open: "Keep this page open: refreshing it or opening it in another tab keeps your place.",
    paused_notice: "Admissions are paused by the organiser.",
    try_later: "Please try again in a few minutes.",
    leave: "Leave the line",
    leave_on_close: "Give up my place when I close this page",
    language: "Language",
    eta_unknown: "estimating…",
    eta_paused: "on hold",
    eta_soon: "under a minute",
    eta_minutes: "about {n} min",
    eta_hours: "about {h} h {m} min",
    eta_opens_in: "opens in {t}",
    prequeue_notice: "Everybody who joins before the start is in the pre-queue; places in line are settled when the sale opens.",
    next_step: "This is the first of two lines: once you are let in here, you go on to the line for {room}.",
};

const KOREAN: Texts = Texts {
    title: "대기열에 있습니다",
    heading: PerState {
        waiting: "대기열에 있습니다",
        paused: "입장이 잠시 멈췄습니다",
        prequeue: "곧 판매가 시작됩니다",
        closed: "지금은 입장할 수 없습니다",
        unavailable: "일시적으로 이용할 수 없습니다",
        admitted: "입장 차례입니다",
        left: "대기열에서 나왔습니다",
        challenge: "대기 번호를 받는 중입니다",
    },
    lead: PerState {
        waiting: "기다려 주셔서 감사합니다. 차례가 되면 자동으로 입장합니다.",
        paused: "입장이 잠시 멈췄습니다. 순서는 그대로 유지됩니다.",
        prequeue: "사전 대기열에 있습니다. 이 페이지를 열어 두세요. 판매가 시작되고 차례가 되면 자동으로 입장합니다.",
        closed: "지금은 입장을 받지 않습니다.",
        unavailable: "지금은 대기열에 연결할 수 없습니다. 순서는 유지됩니다.",
        admitted: "입장하는 중…",
        left: "대기 순서를 포기했습니다.",
        challenge: "자동 접속 프로그램을 막기 위해 브라우저가 잠시 확인 작업을 합니다. 몇 초 걸립니다.",
    },
    challenge_needs_js: "이 대기실은 대기 번호를 받으려면 자바스크립트가 필요합니다. 자바스크립트를 켜고 페이지를 새로 고쳐 주세요.",
    challenge_failed: "확인에 실패했습니다. 다시 시도하는 중…",
    position: "내 번호",
    ahead: "앞 사람",
    eta: "예상 대기 시간",
    progress: "진행률",
    waiting_total: "대기 인원",
    updated: "갱신",
    keep_open: "이 페이지를 열어 두세요. 새로 고침하거나 다른 탭에서 열어도 순서는 유지됩니다.",
    paused_notice: "주최 측이 입장을 잠시 멈췄습니다.",
    try_later: "잠시 후 다시 시도해 주세요.",
    leave: "대기 취소",
    leave_on_close: "이 페이지를 닫으면 대기 취소",
    language: "언어",
    eta_unknown: "계산 중…",
    eta_paused: "일시 중지",
    eta_soon: "1분 이내",
    eta_minutes: "약 {n}분",
    eta_hours: "약 {h}시간 {m}분",
    eta_opens_in: "{t} 후 시작",
    prequeue_notice: "시작 전에 들어온 모든 분은 사전 대기열에 있습니다. 대기 순서는 판매가 시작될 때 정해집니다.",
    next_step: "두 단계 대기열 중 첫 번째입니다. 여기에서 입장하면 {room} 대기열로 이어집니다.",
};

const JAPANESE: Texts = Texts {
    title: "順番待ちをしています",
    heading: PerState {
        waiting: "順番待ちをしています",
        paused: "入場を一時停止しています",
        prequeue: "まもなく販売開始です",
        closed: "現在ご入場いただけません",
        unavailable: "一時的にご利用いただけません",
        admitted: "お客様の番です",
        left: "列から離れました",
        challenge: "順番を確保しています",
    },
    lead: PerState {
        waiting: "お待ちいただきありがとうございます。順番が来ると自動的にご案内します。",
        paused: "入場を一時停止しています。順番はそのまま保持されます。",
        prequeue: "事前待機列に並んでいます。このページを開いたままにしてください。販売開始後、順番が来ると自動的にご案内します。",
        closed: "現在、入場を受け付けていません。",
        unavailable: "現在、待合室に接続できません。順番は保持されています。",
        admitted: "ご案内しています…",
        left: "順番を放棄しました。",
        challenge: "ボットを列から締め出すため、ブラウザで短い確認を行っています。数秒かかります。",
    },
    challenge_needs_js: "この待合室で順番を確保するにはJavaScriptが必要です。JavaScriptを有効にしてページを再読み込みしてください。",
    challenge_failed: "確認に失敗しました。再試行しています…",
    position: "あなたの番号",
    ahead: "前の人数",
    eta: "予想待ち時間",
    progress: "進行状況",
    waiting_total: "待っている人数",
    updated: "更新",
    keep_open: "このページを開いたままにしてください。再読み込みしても、別のタブで開いても順番は保持されます。",
    paused_notice: "主催者が入場を一時停止しています。",
    try_later: "数分後にもう一度お試しください。",
    leave: "列から抜ける",
    leave_on_close: "このページを閉じたら順番を放棄する",
    language: "言語",
    eta_unknown: "計算中…",
    eta_paused: "一時停止中",
    eta_soon: "1分以内",
    eta_minutes: "約{n}分",
    eta_hours: "約{h}時間{m}分",
    eta_opens_in: "あと{t}で開始",
    prequeue_notice: "開始前に参加した方は全員、事前待機列に入ります。順番は販売開始時に決まります。",
    next_step: "これは2段階の待機列の1つ目です。ここで入場すると、{room} の待機列に進みます。",
};

const CHINESE_SIMPLIFIED: Texts = Texts {
    title: "您正在排队",
    heading: PerState {
        waiting: "您正在排队",
        paused: "排队已暂停",
        prequeue: "即将开售",
        closed: "暂不开放入场",
        unavailable: "暂时无法使用",
        admitted: "轮到您了",
        left: "您已离开队列",
        challenge: "正在为您取号",
    },
    lead: PerState {
        waiting: "感谢您耐心等待。轮到您时将自动进入。",
        paused: "入场暂时停止，您的位置会保留。",
        prequeue: "您在预排队中。请保持此页面打开：开售后轮到您时将自动进入。",
        closed: "目前暂停入场。",
        unavailable: "暂时无法连接排队系统。您的位置会保留。",
        admitted: "正在进入…",
        left: "您已放弃排队位置。",
        challenge: "您的浏览器正在进行简短验证，以防机器人插队。需要几秒钟。",
    },
    challenge_needs_js: "此排队页面需要 JavaScript 才能为您取号。请启用后刷新页面。",
    challenge_failed: "验证失败，正在重试…",
    position: "您的号码",
    ahead: "前面人数",
    eta: "预计等待",
    progress: "进度",
    waiting_total: "排队人数",
    updated: "更新于",
    keep_open: "请保持此页面打开：刷新或在其他标签页中打开都不会影响您的位置。",
    paused_notice: "主办方已暂停入场。",
    try_later: "请几分钟后再试。",
    leave: "离开队列",
    leave_on_close: "关闭此页面时放弃我的位置",
    language: "语言",
    eta_unknown: "计算中…",
    eta_paused: "已暂停",
    eta_soon: "不到 1 分钟",
    eta_minutes: "约 {n} 分钟",
    eta_hours: "约 {h} 小时 {m} 分钟",
    eta_opens_in: "{t} 后开始",
    prequeue_notice: "开始前加入的所有人都在预排队中；排队顺序在开售时确定。",
    next_step: "这是两段排队中的第一段：在这里获准进入后，您将进入 {room} 的排队。",
};

const CHINESE_TRADITIONAL: Texts = Texts {
    title: "您正在排隊",
    heading: PerState {
        waiting: "您正在排隊",
        paused: "排隊已暫停",
        prequeue: "即將開賣",
        closed: "暫不開放入場",
        unavailable: "暫時無法使用",
        admitted: "輪到您了",
        left: "您已離開隊伍",
        challenge: "正在為您取號",
    },
    lead: PerState {
        waiting: "感謝您耐心等候。輪到您時將自動進入。",
        paused: "入場暫時停止，您的位置會保留。",
        prequeue: "您在預排隊中。請保持此頁面開啟：開賣後輪到您時將自動進入。",
        closed: "目前暫停入場。",
        unavailable: "暫時無法連線至排隊系統。您的位置會保留。",
        admitted: "正在進入…",
        left: "您已放棄排隊位置。",
        challenge: "您的瀏覽器正在進行簡短驗證，以防機器人插隊。需要幾秒鐘。",
    },
    challenge_needs_js: "此排隊頁面需要 JavaScript 才能為您取號。請啟用後重新整理頁面。",
    challenge_failed: "驗證失敗，正在重試…",
    position: "您的號碼",
    ahead: "前面人數",
    eta: "預計等候",
    progress: "進度",
    waiting_total: "排隊人數",
    updated: "更新於",
    keep_open: "請保持此頁面開啟：重新整理或在其他分頁開啟都不會影響您的位置。",
    paused_notice: "主辦單位已暫停入場。",
    try_later: "請幾分鐘後再試。",
    leave: "離開隊伍",
    leave_on_close: "關閉此頁面時放棄我的位置",
    language: "語言",
    eta_unknown: "計算中…",
    eta_paused: "已暫停",
    eta_soon: "不到 1 分鐘",
    eta_minutes: "約 {n} 分鐘",
    eta_hours: "約 {h} 小時 {m} 分鐘",
    eta_opens_in: "{t} 後開始",
    prequeue_notice: "開始前加入的所有人都在預排隊中；排隊順序在開賣時決定。",
    next_step: "這是兩段排隊中的第一段：在這裡獲准進入後，您將進入 {room} 的排隊。",
};

const SPANISH: Texts = Texts {
    title: "Estás en la fila",
    heading: PerState {
        waiting: "Estás en la fila",
        paused: "La fila está en pausa",
        prequeue: "La venta abre pronto",
        closed: "Esta sala está cerrada",
        unavailable: "No disponible por ahora",
        admitted: "Es tu turno",
        left: "Saliste de la fila",
        challenge: "Consiguiendo tu lugar en la fila",
    },
    lead: PerState {
        waiting: "Gracias por esperar. Entrarás automáticamente cuando sea tu turno.",
        paused: "La entrada está en pausa un momento. Conservas tu lugar.",
        prequeue: "Estás en la fila previa. Mantén esta página abierta: entrarás automáticamente cuando abra la venta y sea tu turno.",
        closed: "Ahora mismo no se permite la entrada.",
        unavailable: "No podemos conectar con la sala de espera ahora mismo. Conservas tu lugar.",
        admitted: "Entrando…",
        left: "Renunciaste a tu lugar.",
        challenge: "Tu navegador está haciendo una breve comprobación para mantener a los bots fuera de la fila. Tarda unos segundos.",
    },
    challenge_needs_js: "Esta sala de espera necesita JavaScript para darte un lugar en la fila. Actívalo y vuelve a cargar la página.",
    challenge_failed: "La comprobación falló. Reintentando…",
    position: "tu número",
    ahead: "delante de ti",
    eta: "espera estimada",
    progress: "progreso",
    waiting_total: "personas esperando",
    updated: "actualizado",
    keep_open: "Mantén esta página abierta: si la recargas o la abres en otra pestaña, conservas tu lugar.",
    paused_notice: "El organizador ha pausado la entrada.",
    try_later: "Vuelve a intentarlo en unos minutos.",
    leave: "Salir de la fila",
    leave_on_close: "Renunciar a mi lugar al cerrar esta página",
    language: "Idioma",
    eta_unknown: "calculando…",
    eta_paused: "en pausa",
    eta_soon: "menos de un minuto",
    eta_minutes: "unos {n} min",
    eta_hours: "unas {h} h {m} min",
    eta_opens_in: "abre en {t}",
    prequeue_notice: "Quienes llegan antes del inicio están en la fila previa; el orden se decide cuando abre la venta.",
    next_step: "Esta es la primera de dos filas: cuando entres aquí, pasarás a la fila de {room}.",
};

const FRENCH: Texts = Texts {
    title: "Vous êtes dans la file",
    heading: PerState {
        waiting: "Vous êtes dans la file",
        paused: "La file est en pause",
        prequeue: "La vente ouvre bientôt",
        closed: "Cette salle est fermée",
        unavailable: "Momentanément indisponible",
        admitted: "C’est votre tour",
        left: "Vous avez quitté la file",
        challenge: "Attribution de votre place",
    },
    lead: PerState {
        waiting: "Merci de patienter. Vous entrerez automatiquement quand ce sera votre tour.",
        paused: "L’entrée est suspendue un instant. Vous gardez votre place.",
        prequeue: "Vous êtes dans la pré-file. Gardez cette page ouverte\u{a0}: vous entrerez automatiquement à l’ouverture de la vente, à votre tour.",
        closed: "Personne n’entre pour le moment.",
        unavailable: "La salle d’attente est injoignable pour le moment. Votre place est conservée.",
        admitted: "Entrée en cours…",
        left: "Vous avez renoncé à votre place.",
        challenge: "Votre navigateur fait une brève vérification pour tenir les robots hors de la file. Cela prend quelques secondes.",
    },
    challenge_needs_js: "Cette salle d’attente a besoin de JavaScript pour vous attribuer une place. Activez-le et rechargez la page.",
    challenge_failed: "La vérification a échoué. Nouvel essai…",
    position: "votre numéro",
    ahead: "avant vous",
    eta: "attente estimée",
    progress: "progression",
    waiting_total: "personnes en attente",
    updated: "mis à jour",
    keep_open: "Gardez cette page ouverte\u{a0}: la recharger ou l’ouvrir dans un autre onglet conserve votre place.",
    paused_notice: "L’organisateur a suspendu les entrées.",
    try_later: "Veuillez réessayer dans quelques minutes.",
    leave: "Quitter la file",
    leave_on_close: "Renoncer à ma place en fermant cette page",
    language: "Langue",
    eta_unknown: "estimation…",
    eta_paused: "en pause",
    eta_soon: "moins d’une minute",
    eta_minutes: "environ {n}\u{a0}min",
    eta_hours: "environ {h}\u{a0}h {m}\u{a0}min",
    eta_opens_in: "ouvre dans {t}",
    prequeue_notice: "Toute personne arrivée avant l’ouverture est dans la pré-file\u{a0}; l’ordre est fixé à l’ouverture de la vente.",
    next_step: "Ceci est la première de deux files\u{a0}: une fois admis ici, vous passez à la file de {room}.",
};

const GERMAN: Texts = Texts {
    title: "Sie sind in der Warteschlange",
    heading: PerState {
        waiting: "Sie sind in der Warteschlange",
        paused: "Die Warteschlange ist pausiert",
        prequeue: "Der Verkauf beginnt bald",
        closed: "Dieser Warteraum ist geschlossen",
        unavailable: "Vorübergehend nicht erreichbar",
        admitted: "Sie sind an der Reihe",
        left: "Sie haben die Warteschlange verlassen",
        challenge: "Ihr Platz wird vergeben",
    },
    lead: PerState {
        waiting: "Danke für Ihre Geduld. Sobald Sie an der Reihe sind, werden Sie automatisch eingelassen.",
        paused: "Der Einlass ist kurz unterbrochen. Ihr Platz bleibt erhalten.",
        prequeue: "Sie sind in der Vorab-Warteschlange. Lassen Sie diese Seite geöffnet: Sobald der Verkauf beginnt und Sie an der Reihe sind, werden Sie automatisch eingelassen.",
        closed: "Derzeit wird niemand eingelassen.",
        unavailable: "Der Warteraum ist gerade nicht erreichbar. Ihr Platz bleibt erhalten.",
        admitted: "Sie werden eingelassen…",
        left: "Sie haben Ihren Platz aufgegeben.",
        challenge: "Ihr Browser führt eine kurze Prüfung durch, die Bots aus der Warteschlange fernhält. Das dauert ein paar Sekunden.",
    },
    challenge_needs_js: "Dieser Warteraum braucht JavaScript, um Ihnen einen Platz zu geben. Bitte aktivieren Sie es und laden Sie die Seite neu.",
    challenge_failed: "Die Prüfung ist fehlgeschlagen. Neuer Versuch…",
    position: "Ihre Nummer",
    ahead: "vor Ihnen",
    eta: "geschätzte Wartezeit",
    progress: "Fortschritt",
    waiting_total: "Wartende",
    updated: "aktualisiert",
    keep_open: "Lassen Sie diese Seite geöffnet: Beim Neuladen oder Öffnen in einem anderen Tab bleibt Ihr Platz erhalten.",
    paused_notice: "Der Veranstalter hat den Einlass pausiert.",
    try_later: "Bitte versuchen Sie es in ein paar Minuten erneut.",
    leave: "Warteschlange verlassen",
    leave_on_close: "Platz aufgeben, wenn ich diese Seite schließe",
    language: "Sprache",
    eta_unknown: "wird berechnet…",
    eta_paused: "pausiert",
    eta_soon: "unter einer Minute",
    eta_minutes: "etwa {n} Min.",
    eta_hours: "etwa {h} Std. {m} Min.",
    eta_opens_in: "öffnet in {t}",
    prequeue_notice: "Alle, die vor dem Start kommen, sind in der Vorab-Warteschlange; die Reihenfolge wird beim Verkaufsstart festgelegt.",
    next_step: "Dies ist die erste von zwei Warteschlangen: Sobald Sie hier eingelassen werden, geht es weiter zur Warteschlange für {room}.",
};

const PORTUGUESE_BRAZIL: Texts = Texts {
    title: "Você está na fila",
    heading: PerState {
        waiting: "Você está na fila",
        paused: "A fila está pausada",
        prequeue: "As vendas abrem em breve",
        closed: "Esta sala está fechada",
        unavailable: "Indisponível no momento",
        admitted: "Chegou a sua vez",
        left: "Você saiu da fila",
        challenge: "Garantindo seu lugar na fila",
    },
    lead: PerState {
        waiting: "Obrigado por aguardar. Você entrará automaticamente quando chegar a sua vez.",
        paused: "A entrada está pausada por um momento. Você mantém seu lugar.",
        prequeue: "Você está na pré-fila. Mantenha esta página aberta: você entrará automaticamente quando as vendas abrirem e chegar a sua vez.",
        closed: "Ninguém está entrando no momento.",
        unavailable: "Não foi possível conectar à sala de espera agora. Seu lugar está garantido.",
        admitted: "Entrando…",
        left: "Você desistiu do seu lugar.",
        challenge: "Seu navegador está fazendo uma verificação rápida para manter robôs fora da fila. Leva alguns segundos.",
    },
    challenge_needs_js: "Esta sala de espera precisa de JavaScript para garantir seu lugar na fila. Ative-o e recarregue a página.",
    challenge_failed: "A verificação falhou. Tentando de novo…",
    position: "seu número",
    ahead: "à sua frente",
    eta: "espera estimada",
    progress: "progresso",
    waiting_total: "pessoas esperando",
    updated: "atualizado",
    keep_open: "Mantenha esta página aberta: recarregar ou abrir em outra aba não faz você perder o lugar.",
    paused_notice: "O organizador pausou a entrada.",
    try_later: "Tente novamente em alguns minutos.",
    leave: "Sair da fila",
    leave_on_close: "Desistir do meu lugar ao fechar esta página",
    language: "Idioma",
    eta_unknown: "calculando…",
    eta_paused: "em pausa",
    eta_soon: "menos de um minuto",
    eta_minutes: "cerca de {n} min",
    eta_hours: "cerca de {h} h {m} min",
    eta_opens_in: "abre em {t}",
    prequeue_notice: "Todos que entram antes do início ficam na pré-fila; a ordem é definida quando as vendas abrem.",
    next_step: "Esta é a primeira de duas filas: quando você entrar aqui, seguirá para a fila de {room}.",
};

const INDONESIAN: Texts = Texts {
    title: "Anda sedang mengantre",
    heading: PerState {
        waiting: "Anda sedang mengantre",
        paused: "Antrean dijeda",
        prequeue: "Penjualan segera dibuka",
        closed: "Ruang ini ditutup",
        unavailable: "Sementara tidak tersedia",
        admitted: "Giliran Anda tiba",
        left: "Anda keluar dari antrean",
        challenge: "Menyiapkan tempat Anda di antrean",
    },
    lead: PerState {
        waiting: "Terima kasih telah menunggu. Anda akan masuk otomatis saat tiba giliran Anda.",
        paused: "Akses masuk dijeda sebentar. Tempat Anda tetap aman.",
        prequeue: "Anda berada di pra-antrean. Biarkan halaman ini terbuka: Anda akan masuk otomatis saat penjualan dibuka dan tiba giliran Anda.",
        closed: "Saat ini belum ada yang bisa masuk.",
        unavailable: "Ruang tunggu tidak dapat dihubungi saat ini. Tempat Anda tetap aman.",
        admitted: "Membawa Anda masuk…",
        left: "Anda telah melepaskan tempat Anda.",
        challenge: "Browser Anda sedang melakukan pemeriksaan singkat agar bot tidak masuk antrean. Ini butuh beberapa detik.",
    },
    challenge_needs_js: "Ruang tunggu ini memerlukan JavaScript untuk memberi Anda tempat di antrean. Aktifkan lalu muat ulang halaman.",
    challenge_failed: "Pemeriksaan gagal. Mencoba lagi…",
    position: "nomor Anda",
    ahead: "di depan Anda",
    eta: "perkiraan waktu tunggu",
    progress: "kemajuan",
    waiting_total: "orang menunggu",
    updated: "diperbarui",
    keep_open: "Biarkan halaman ini terbuka: memuat ulang atau membukanya di tab lain tidak menghilangkan tempat Anda.",
    paused_notice: "Penyelenggara menjeda akses masuk.",
    try_later: "Silakan coba lagi dalam beberapa menit.",
    leave: "Keluar dari antrean",
    leave_on_close: "Lepaskan tempat saya saat halaman ini ditutup",
    language: "Bahasa",
    eta_unknown: "menghitung…",
    eta_paused: "dijeda",
    eta_soon: "kurang dari semenit",
    eta_minutes: "sekitar {n} menit",
    eta_hours: "sekitar {h} jam {m} menit",
    eta_opens_in: "dibuka dalam {t}",
    prequeue_notice: "Semua yang bergabung sebelum dimulai ada di pra-antrean; urutan ditentukan saat penjualan dibuka.",
    next_step: "Ini antrean pertama dari dua: setelah Anda masuk di sini, Anda lanjut ke antrean {room}.",
};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every message of `lang` by its dotted key (`heading.waiting`).
    fn messages(lang: Lang) -> Vec<(String, String)> {
        let value = serde_json::to_value(texts(lang)).unwrap();
        let mut flat = Vec::new();
        for (key, value) in value.as_object().unwrap() {
            match value {
                serde_json::Value::Object(per_state) => {
                    for (state, text) in per_state {
                        flat.push((format!("{key}.{state}"), text.as_str().unwrap().to_owned()));
                    }
                }
                text => flat.push((key.clone(), text.as_str().unwrap().to_owned())),
            }
        }
        flat
    }

    fn placeholders(text: &str) -> Vec<&str> {
        ["{n}", "{h}", "{m}", "{t}"]
            .into_iter()
            .filter(|placeholder| text.contains(placeholder))
            .collect()
    }

    #[test]
    fn every_message_has_all_ten_languages() {
        let english = messages(Lang::En);
        assert!(english.len() > 30, "{} messages", english.len());
        for lang in Lang::ALL {
            let translated = messages(lang);
            let keys = |messages: &[(String, String)]| -> Vec<String> {
                messages.iter().map(|(key, _)| key.clone()).collect()
            };
            assert_eq!(keys(&translated), keys(&english), "{lang:?} has every key");
            for ((key, text), (_, original)) in translated.iter().zip(&english) {
                assert!(!text.trim().is_empty(), "{lang:?} {key} is empty");
                assert_eq!(
                    placeholders(text),
                    placeholders(original),
                    "{lang:?} {key} keeps the placeholders: {text:?}"
                );
            }
            if lang != Lang::En {
                let same = translated
                    .iter()
                    .zip(&english)
                    .filter(|((_, text), (_, original))| text == original)
                    .count();
                assert_eq!(same, 0, "{lang:?} leaves {same} messages in English");
            }
        }
    }

    #[test]
    fn estimates_read_in_each_language() {
        let check = |lang, seconds, expected: &str| {
            assert_eq!(eta_text(lang, seconds), expected, "{lang:?} {seconds:?}");
        };
        check(Lang::En, None, "estimating…");
        check(Lang::En, Some(59), "under a minute");
        check(Lang::En, Some(61), "about 2 min");
        check(Lang::En, Some(3_700), "about 1 h 2 min");
        check(Lang::Ko, Some(150), "약 3분");
        check(Lang::Ja, Some(3_700), "約1時間2分");
        check(Lang::ZhHant, Some(150), "約 3 分鐘");
        check(Lang::De, Some(150), "etwa 3 Min.");
        check(Lang::Fr, Some(150), "environ 3\u{a0}min");
        assert_eq!(opens_in_text(Lang::PtBr, 65), "abre em 1:05");
        assert_eq!(opens_in_text(Lang::Ja, 3_725), "あと1:02:05で開始");
    }
}
